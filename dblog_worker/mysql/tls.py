"""TLS of MySQL/MariaDB connections, asked for as libpq asks: the DSN's ``sslmode``,
``sslrootcert``, ``sslcert`` and ``sslkey`` query parameters.

=============  =============================================================================
``sslmode``    what the connection does
=============  =============================================================================
disable        plain text only
prefer         TLS when the server offers it, unverified; plain text otherwise (the default)
require        TLS or nothing; the server's certificate is not checked, unless sslrootcert
               is given: then as verify-ca (as libpq does)
verify-ca      TLS; the server's certificate chain must lead to ``sslrootcert``
verify-full    as verify-ca, and the certificate must name the DSN's host
=============  =============================================================================
"""

from __future__ import annotations

import difflib
import os
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote

import pymysql
from pymysql.connections import Connection

from dblog_worker.errors import ConfigError

SSL_MODES = ("disable", "prefer", "require", "verify-ca", "verify-full")
PARAMETERS = ("sslmode", "sslrootcert", "sslcert", "sslkey")
_SSL_CONNECTION_ERROR = 2026  # the client asks for TLS, the server does not offer it
_ACCESS_DENIED = 1045


class SharedTlsConnection(Connection):  # type: ignore[misc]
    """PyMySQL's connection whose TLS context is built once per setting and shared.
    PyMySQL builds one per connection, even for ``prefer`` where it checks nothing, and
    building one loads the system's certificate authorities: 50 ms of CPU a connection."""

    _contexts: ClassVar[dict[str, ssl.SSLContext]] = {}

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if isinstance(sslp, ssl.SSLContext):
            return sslp
        try:  # a CA or certificate file replaced on disk (rotated) makes a new context
            files = [(path, found.st_mtime_ns, found.st_size)
                     for name in ("ca", "cert", "key") if (path := sslp.get(name))
                     for found in (os.stat(path),)]
        except OSError:
            unreadable: ssl.SSLContext = super()._create_ssl_ctx(sslp)  # raises, naming it
            return unreadable
        key = repr((sorted(sslp.items()), files))
        context = SharedTlsConnection._contexts.get(key)
        if context is None:
            context = SharedTlsConnection._contexts[key] = super()._create_ssl_ctx(sslp)
        return context


@dataclass(frozen=True)
class MyTls:
    mode: str = "prefer"
    rootcert: str | None = None  # the CA certificates (PEM) that verify the server
    cert: str | None = None  # a client certificate (PEM) and its key
    key: str | None = None

    @property
    def verified(self) -> bool:
        return self.rootcert is not None

    def connect_args(self) -> dict[str, Any]:
        """Keyword arguments of ``pymysql.connect`` (PyMySQL prefers TLS by itself)."""
        if self.mode == "disable":
            return {"ssl_disabled": True}
        if self.mode == "prefer":
            return {}
        # The dict of PyMySQL's ssl= is the one form that can ask for TLS without checking
        # the certificate (sslmode=require); its ssl_* arguments build the same dict.
        settings: dict[str, Any] = {"ca": self.rootcert, "verify_mode": self.verified,
                                    "check_hostname": self.mode == "verify-full"}
        if self.cert is not None:
            settings["cert"] = self.cert
            settings["key"] = self.key
        return {"ssl": settings}

    def query(self) -> str:
        """The DSN's query string (``?sslmode=...``), empty for the default."""
        pairs = [("sslmode", self.mode if self.mode != "prefer" else None),
                 ("sslrootcert", self.rootcert), ("sslcert", self.cert), ("sslkey", self.key)]
        text = "&".join(f"{name}={quote(value, safe='/')}" for name, value in pairs
                        if value is not None)
        return f"?{text}" if text else ""

    def jdbc(self) -> dict[str, str]:
        """Connection properties of MariaDB Connector/J 2.x (useSsl, serverSslCert, ...).
        ``serverSslCert`` carries the CA's PEM text itself: Spark's executors need no file."""
        if self.mode in ("disable", "prefer"):
            return {}
        if self.cert is not None:
            raise ValueError(
                "the Spark merge's JDBC driver (MariaDB Connector/J 2.x) takes client "
                "certificates only from a Java keystore, not sslcert/sslkey: give the target "
                "user a password instead, or merge without a client certificate")
        if self.rootcert is None:
            return {"useSsl": "true", "trustServerCertificate": "true"}
        try:
            with open(self.rootcert, encoding="ascii") as pem:
                certificate = pem.read()
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read sslrootcert ({self.rootcert}): {exc}") from None
        return {"useSsl": "true", "serverSslCert": certificate,
                "disableSslHostnameVerification": str(self.mode != "verify-full").lower()}


class UnknownParameter(ValueError):
    """A DSN's query names a parameter other than :data:`PARAMETERS`; ``unnamed`` says so
    without its name."""

    def __init__(self, name: str) -> None:
        self.unnamed = (f"a MySQL DSN takes only the parameters {', '.join(PARAMETERS)} "
                        "(the database and everything else are set elsewhere)")
        # named only when it reads as a misspelt parameter: else it may be a piece of a
        # password (mysql://u:pa&ss=@db?sslmode=x has the parameter "ss")
        close = difflib.get_close_matches(name.lower(), PARAMETERS, n=1)
        if close and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", name):
            super().__init__(f"unknown parameter {name!r} (did you mean {close[0]}?): "
                             f"{self.unnamed}")
        else:
            super().__init__(self.unnamed)


def parse_tls(query: list[tuple[str, str]]) -> MyTls:
    """The TLS of a DSN's query parameters. Messages name no value: a malformed DSN can put
    part of its password in the query (``mysql://user:pa?ss@host``)."""
    values: dict[str, str] = {}
    for name, value in query:
        if name not in PARAMETERS:
            raise UnknownParameter(name)
        if name in values:
            raise ValueError(f"a MySQL DSN gives {name} once")
        values[name] = value
    mode = values.pop("sslmode", "prefer")
    if mode not in SSL_MODES:
        raise ValueError(f"sslmode of a MySQL DSN is one of {', '.join(SSL_MODES)}")
    for name, value in values.items():
        if not value.startswith("/"):
            raise ValueError(f"{name} of a MySQL DSN is an absolute path to a PEM file")
    if values and mode in ("disable", "prefer"):
        raise ValueError(f"sslrootcert, sslcert and sslkey are used with sslmode=require, "
                         f"verify-ca or verify-full, not {mode}")
    if mode in ("verify-ca", "verify-full") and "sslrootcert" not in values:
        raise ValueError(f"sslmode={mode} needs sslrootcert=/path/to/ca.pem, the certificate "
                         "authority that signed the server's certificate")
    if ("sslcert" in values) != ("sslkey" in values):
        raise ValueError("sslcert and sslkey of a MySQL DSN go together: the client "
                         "certificate and its private key")
    return MyTls(mode=mode, rootcert=values.get("sslrootcert"), cert=values.get("sslcert"),
                 key=values.get("sslkey"))


def refusal(exc: BaseException, where: str, tls: MyTls) -> str | None:
    """What to tell of a connection to ``where`` (a DSN without password) that failed for
    its TLS, which no retry can fix; None for any other failure."""
    if isinstance(exc, OSError) and (tls.verified or tls.cert is not None):  # its files
        return (f"cannot use the TLS files of {where} ({exc.strerror or exc}): "
                "sslrootcert, sslcert and sslkey must be readable PEM files, the key that of "
                "the certificate")
    if not isinstance(exc, pymysql.err.OperationalError) or not exc.args:
        return None
    cause = getattr(exc, "original_exception", None)
    if isinstance(cause, ssl.SSLCertVerificationError):
        reason = str(cause.verify_message).rstrip(".")
        if "mismatch" in reason:
            return (f"{where} presents a TLS certificate for another host ({reason}): "
                    "sslmode=verify-full needs the DSN's host to be a name or address the "
                    "certificate lists; use one, or sslmode=verify-ca")
        return (f"{where} presents a TLS certificate that sslrootcert does not vouch for "
                f"({reason}): sslrootcert must be the certificate authority that signed the "
                "server's certificate")
    if isinstance(cause, ssl.SSLError):
        return (f"the TLS handshake with {where} failed ({cause.reason or cause}): check "
                "the server's ssl-cert and ssl-key, and the DSN's sslcert and sslkey")
    if exc.args[0] == _SSL_CONNECTION_ERROR:
        return (f"{where} asks for TLS (sslmode={tls.mode}) but the server does not offer it: "
                "give the server ssl-cert and ssl-key, or remove sslmode")
    if exc.args[0] == _ACCESS_DENIED and tls.mode == "disable":
        return (f"{where} refused the login over plain text ({exc.args[1]}): a server with "
                "require_secure_transport=ON refuses every unencrypted connection so; remove "
                "sslmode=disable (better: sslmode=verify-full with sslrootcert), or check the "
                "user and password")
    return None


@contextmanager
def tls_errors(where: str, tls: MyTls) -> Iterator[None]:
    """Opening a connection: a failure of its TLS becomes a ConfigError (see :func:`refusal`)."""
    try:
        yield
    except (OSError, pymysql.err.OperationalError) as exc:
        problem = refusal(exc, where, tls)
        if problem is None:
            raise
        raise ConfigError(problem) from exc
