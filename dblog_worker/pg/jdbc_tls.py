"""The TLS of a PostgreSQL target's DSN, for the JDBC connections that Spark stages with.

libpq and the PostgreSQL JDBC driver (pgjdbc 42.x) take the same ``sslmode``,
``sslrootcert``, ``sslcert``, ``sslkey`` and ``sslpassword``, with two differences made up
for here:

* libpq verifies the server's certificate with ``sslmode=require`` when ``sslrootcert`` is
  given (as ``verify-ca``); pgjdbc does not: it is told ``verify-ca``. ``sslrootcert=system``
  (libpq 16: the system's certificate authorities) is Java's default trust store.
* libpq reads a PEM private key; pgjdbc reads only PKCS #8 DER (or PKCS #12). The key is
  converted (PKCS #8 PEM, plain or encrypted with ``sslpassword``; PKCS #1 RSA PEM) into a
  file that only this user may read, in a folder of the merge's: executors on this machine
  (a local master) read it there. Executors on other machines do not have it: use a
  password for the target there, as a MySQL/MariaDB target requires.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from dblog_worker.errors import ConfigError

_PEM = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)
_RSA_ENCRYPTION = bytes.fromhex("300d06092a864886f70d0101010500")  # AlgorithmIdentifier
CONVERT = ("convert it to PKCS #8, which libpq reads too: openssl pkcs8 -topk8 -in KEY "
           "-out KEY.pk8.pem (-nocrypt, or a passphrase given as sslpassword)")


def jdbc_properties(params: Mapping[str, str], folder: Callable[[], Path]) -> dict[str, str]:
    """pgjdbc connection properties for the TLS options of a parsed libpq DSN; ``folder``
    gives the private folder (0700) where a converted key is written."""
    properties: dict[str, str] = {}
    mode, rootcert = params.get("sslmode"), params.get("sslrootcert")
    if mode:
        properties["sslmode"] = "verify-ca" if mode == "require" and rootcert else mode
    if rootcert == "system":
        properties["sslfactory"] = "org.postgresql.ssl.DefaultJavaSSLFactory"
    elif rootcert:
        properties["sslrootcert"] = rootcert
    if params.get("sslcert"):
        properties["sslcert"] = params["sslcert"]
    if params.get("sslkey"):
        properties["sslkey"] = str(der_key_file(Path(params["sslkey"]), folder()))
    if params.get("sslpassword"):
        properties["sslpassword"] = params["sslpassword"]
    return properties


def der_key_file(key: Path, folder: Path) -> Path:
    """``key`` (libpq's PEM) as the PKCS #8 DER that pgjdbc reads, in a new 0600 file of
    ``folder``; ConfigError naming the key file (never its content) if it cannot be."""
    try:
        data = key.read_bytes()
    except OSError as exc:
        raise ConfigError(f"target.dsn: cannot read sslkey {key}: {exc.strerror or exc}; it "
                          "must be readable here, where the merge's driver runs") from None
    der = pkcs8_der(data, key)
    path = folder / "sslkey.pk8"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(der)
    return path


def pkcs8_der(data: bytes, key: Path) -> bytes:
    """The PKCS #8 DER of a private key file's content (PEM, or DER already)."""
    found = _PEM.search(data)
    if found is None:
        if data[:1] == b"\x30":  # DER already (a SEQUENCE)
            return data
        raise ConfigError(f"target.dsn: sslkey {key} is not a PEM private key")
    label, body = found[1].decode(), found[2]
    if b"Proc-Type:" in body:
        raise ConfigError(f"target.dsn: sslkey {key} is an encrypted PKCS #1 key, which "
                          f"the Spark merge's JDBC driver cannot read: {CONVERT}")
    try:
        der = base64.b64decode(b"".join(body.split()), validate=True)
    except binascii.Error:
        raise ConfigError(f"target.dsn: sslkey {key} is not valid PEM") from None
    if label in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"):
        return der
    if label == "RSA PRIVATE KEY":  # PKCS #1: wrapped as PKCS #8's PrivateKeyInfo
        return _sequence(b"\x02\x01\x00" + _RSA_ENCRYPTION + _tlv(0x04, der))
    raise ConfigError(f"target.dsn: sslkey {key} is a {label}, which the Spark merge's "
                      f"JDBC driver cannot read: {CONVERT}")


def _tlv(tag: int, value: bytes) -> bytes:
    size = len(value)
    if size < 0x80:
        length = bytes([size])
    else:
        octets = size.to_bytes((size.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(octets)]) + octets
    return bytes([tag]) + length + value


def _sequence(value: bytes) -> bytes:
    return _tlv(0x30, value)
