"""An S3-compatible bucket, as the landing zone uses it: a thin layer over botocore.

:class:`S3Location` is ``[landing] path = "s3://bucket/prefix"`` with its ``[landing.s3]``
options (endpoint, region, path-style addressing, a CA bundle). Credentials are never
part of it: botocore's standard chain finds them (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and the shared files,
a web identity, the instance's role).

:class:`Bucket` speaks the few requests the landing zone needs: list a prefix, get an
object (whole, or a range of it: :class:`ObjectFile` gives pyarrow a seekable file that
reads only what it asks for, so a footer costs two small ranged GETs), put one whole
object (a single PUT is atomic: nobody ever sees part of it) with the conditions that
replace rename (``If-None-Match: *`` creates only if absent, ``If-Match: <etag>``
replaces only the version read), and delete. A failed condition is
:class:`PreconditionFailed`; the store unreachable, slow or refusing (a full quota, a
5xx) is :class:`S3Unavailable`, an ``OSError``, so that the worker treats it as it
treats a full disk: the checkpoint stays, the session starts again.
"""

from __future__ import annotations

import contextlib
import io
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from botocore.loaders import Loader
    from botocore.session import Session

_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX_PART_RE = re.compile(r"[A-Za-z0-9_.=-]+")


class S3Unavailable(OSError):
    """The object store cannot be reached or refused a request (transient)."""


class PreconditionFailed(Exception):
    """A conditional put found the object present (If-None-Match) or changed (If-Match)."""


@dataclass(frozen=True)
class S3Location:
    """Where the landing zone lives in an S3-compatible store, and how to reach it."""

    bucket: str
    prefix: str = ""  # "" or "a/b", without slashes at either end
    endpoint: str = ""  # "" : AWS's own, from the region
    region: str = "us-east-1"
    path_style: bool = False
    ca_bundle: str = ""  # a PEM file of the CAs to trust, else the system's

    @classmethod
    def parse(cls, url: str, **options: Any) -> S3Location:
        """``s3://bucket/prefix``; ValueError saying what is wrong."""
        if not url.startswith("s3://"):
            raise ValueError(f"an object-store landing path is s3://bucket/prefix, got {url!r}")
        bucket, _, prefix = url[len("s3://"):].partition("/")
        prefix = prefix.strip("/")
        if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
            raise ValueError(f"{url!r}: {bucket!r} is not a bucket name (3-63 characters of"
                             " a-z, 0-9, '.', '-')")
        if prefix and not all(_PREFIX_PART_RE.fullmatch(p) for p in prefix.split("/")):
            raise ValueError(f"{url!r}: the prefix may hold only A-Z a-z 0-9 _ . = - and '/'"
                             " between non-empty parts")
        if any(p in {".", ".."} for p in prefix.split("/")):
            raise ValueError(f"{url!r}: the prefix may not hold '.' or '..' parts")
        return cls(bucket=bucket, prefix=prefix, **options)

    def store_options(self) -> dict[str, Any]:
        """How the store is reached (not where in it): the options of :meth:`parse`."""
        return {"endpoint": self.endpoint, "region": self.region,
                "path_style": self.path_style, "ca_bundle": self.ca_bundle}

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def key(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts] if self.prefix else parts)

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    mtime: float  # seconds since the epoch, when the object was written
    etag: str = ""


_loader: Loader | None = None
_loader_lock = threading.Lock()


def new_session() -> Session:
    """A botocore session that reads botocore's data files (the endpoints, the S3 model:
    megabytes of JSON) through one loader of the process, which keeps them once read: a
    client then costs ~0.02 s of CPU, not 0.15-0.3 s. Each session still finds its own
    credentials (the environment may have changed)."""
    import botocore.loaders
    import botocore.session

    global _loader
    with _loader_lock:
        if _loader is None:
            _loader = botocore.loaders.create_loader()
        loader = _loader
    session = botocore.session.get_session()
    session.register_component("data_loader", loader)
    return session


def make_client(location: S3Location) -> BaseClient:
    import botocore.config

    session = new_session()
    config = botocore.config.Config(
        s3={"addressing_style": "path" if location.path_style else "auto"},
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=5, read_timeout=30, tcp_keepalive=True,
        # a checksum on every request the store may not know: only where S3 requires one
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    verify: bool | str = location.ca_bundle or True
    return session.create_client("s3", region_name=location.region,
                                 endpoint_url=location.endpoint or None, verify=verify,
                                 config=config)


class Bucket:
    """The requests of the landing zone on one bucket (thread-safe: botocore's client is)."""

    def __init__(self, location: S3Location, client: BaseClient | None = None) -> None:
        self.location = location
        self._client = client if client is not None else make_client(location)

    def uri(self, key: str, scheme: str = "s3") -> str:
        return f"{scheme}://{self.location.bucket}/{key}"

    def list(self, prefix: str, delimiter: str = "") -> tuple[list[ObjectInfo], list[str]]:
        """The objects under ``prefix`` (and, with a delimiter, the common prefixes)."""
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self.location.bucket, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        with _errors("list", self.uri(prefix)):
            while True:
                page = self._client.list_objects_v2(**kwargs)
                for item in page.get("Contents", ()):
                    objects.append(ObjectInfo(item["Key"], int(item["Size"]),
                                              _seconds(item["LastModified"]),
                                              str(item.get("ETag", ""))))
                prefixes.extend(p["Prefix"] for p in page.get("CommonPrefixes", ()))
                if not page.get("IsTruncated"):
                    return objects, prefixes
                kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def get(self, key: str, byte_range: tuple[int, int] | None = None) -> tuple[bytes, str]:
        """The object's bytes (``byte_range``: first and last byte, inclusive) and ETag;
        FileNotFoundError if it does not exist."""
        kwargs: dict[str, Any] = {"Bucket": self.location.bucket, "Key": key}
        if byte_range is not None:
            kwargs["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        with _errors("get", self.uri(key)):
            response = self._client.get_object(**kwargs)
            return response["Body"].read(), str(response.get("ETag", ""))

    def head(self, key: str) -> ObjectInfo:
        with _errors("head", self.uri(key)):
            response = self._client.head_object(Bucket=self.location.bucket, Key=key)
        return ObjectInfo(key, int(response["ContentLength"]),
                          _seconds(response["LastModified"]), str(response.get("ETag", "")))

    def put(self, key: str, body: bytes, *, if_none_match: bool = False, if_match: str = "",
            metadata: Mapping[str, str] | None = None) -> str:
        """Write the whole object in one request; its new ETag. PreconditionFailed when
        ``if_none_match`` and it exists, or ``if_match`` and its ETag is another."""
        kwargs: dict[str, Any] = {"Bucket": self.location.bucket, "Key": key, "Body": body}
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"
        if if_match:
            kwargs["IfMatch"] = if_match
        if metadata:
            kwargs["Metadata"] = dict(metadata)
        with _errors("put", self.uri(key)):
            return str(self._client.put_object(**kwargs).get("ETag", ""))

    def delete(self, key: str) -> None:
        with _errors("delete", self.uri(key)):
            self._client.delete_object(Bucket=self.location.bucket, Key=key)

    def open(self, info: ObjectInfo) -> ObjectFile:
        return ObjectFile(self, info)

    def check(self) -> None:
        """The bucket is there and these credentials may list it; S3Unavailable or a
        ValueError that says what to do otherwise."""
        self.list(self.location.key("") if self.location.prefix else "", "/")


class ObjectFile(io.RawIOBase):
    """A read-only, seekable view of one object: each read is a ranged GET."""

    def __init__(self, bucket: Bucket, info: ObjectInfo) -> None:
        super().__init__()
        self._bucket, self._info, self._pos = bucket, info, 0

    @property
    def name(self) -> str:
        return self._bucket.uri(self._info.key)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._info.size

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._info.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        end = self._info.size if size is None or size < 0 else min(self._info.size,
                                                                    self._pos + size)
        if end <= self._pos:
            return b""
        data, _ = self._bucket.get(self._info.key, (self._pos, end - 1))
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)


def _seconds(value: object) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(str(value))


@contextlib.contextmanager
def _errors(verb: str, where: str) -> Iterator[None]:
    """botocore's exceptions as the landing zone's: FileNotFoundError for a missing
    object, PreconditionFailed, S3Unavailable for the rest (the message names the request
    and the object, never a credential)."""
    import botocore.exceptions as bex

    try:
        yield
    except bex.ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        if status == 412 or code in {"PreconditionFailed", "ConditionalRequestConflict"}:
            raise PreconditionFailed(f"{verb} {where}: {code}") from None
        if status == 404 or code in {"NoSuchKey", "404", "NotFound"}:
            raise FileNotFoundError(f"{where} does not exist") from None
        message = str(error.get("Message", "")) or code
        hint = (": these credentials may not do it, or the bucket is read only (over its"
                " quota?)" if status == 403 else "")
        raise S3Unavailable(f"{verb} {where} refused ({status} {code}): {message}{hint}"
                            ) from None
    except bex.NoCredentialsError:
        raise S3Unavailable(
            f"{verb} {where}: no credentials found; set AWS_ACCESS_KEY_ID and"
            " AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment") from None
    except bex.BotoCoreError as exc:
        raise S3Unavailable(f"{verb} {where} failed: {exc}") from None


def iter_keys(objects: list[ObjectInfo], prefix: str) -> Iterator[tuple[str, ObjectInfo]]:
    """(name below ``prefix``, info) of each object directly under it."""
    for info in objects:
        name = info.key[len(prefix):]
        if name and "/" not in name:
            yield name, info
