"""Logging setup: plain text, or one JSON object a line.

A JSON line has ``ts`` (UTC, milliseconds), ``level``, ``logger``, ``message`` and
``source`` (the configured source name); ``request_id`` when the record concerns a dump
request; ``error`` with the traceback of an exception; and any other field a caller
passed with ``extra=`` (the HTTP server's ``http_request_id``, for instance).

Secrets never reach the log: passwords and other secret options (``sslpassword``, ...)
in connection strings and URLs and bearer tokens are masked in every message, and
``extra`` fields named like a secret are dropped, in both formats. The HTTP libraries of
the object store (botocore, urllib3) never log below INFO: their DEBUG lines hold request
headers, signatures and session tokens among them.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

MASK = "***"
_SECRETS = (
    # libpq's secret options (password, sslpassword, oauth_client_secret, scram_*_key),
    # options (it may carry any setting), Spark's (fs.s3a.secret.key=...)
    (re.compile(r"(?i)((?<![\w.-])(?:[\w.-]*(?:password|secret)[\w.-]*|scram_\w*key|options)"
                r"\s*=\s*)"
                r"('(?:[^'\\]|\\.)*'|\S+)"), rf"\g<1>{MASK}"),
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@]*:)[^\s@/]+@"), rf"\g<1>{MASK}@"),
    (re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+"), rf"\g<1>{MASK}"),
    (re.compile(r"(?i)([?&](?:access_)?token=)[^&\s]+"), rf"\g<1>{MASK}"),
)
_SECRET_NAME = re.compile(r"(?i)password|passwd|secret|token|authorization|cookie|dsn|credential")
# Libraries whose DEBUG lines carry request headers (an S3 request's Authorization and
# X-Amz-Security-Token): never below INFO, whatever the worker's level.
QUIET_LIBRARIES = ("botocore", "urllib3", "s3transfer")
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName"}


def redact(text: str) -> str:
    """``text`` with passwords in DSNs and URLs and bearer tokens masked."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    def __init__(self, source: str | None = None) -> None:
        super().__init__()
        self.source = source

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
            "source": self.source,
        }
        for name, value in vars(record).items():
            if name in _STANDARD or name in document or _SECRET_NAME.search(name):
                continue
            document[name] = value if _plain(value) else redact(str(value))
        if record.exc_info:
            document["error"] = redact(self.formatException(record.exc_info))
        return json.dumps(document, default=str)


def _plain(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float)) or (
        isinstance(value, str) and redact(value) == value)


def setup_logging(fmt: str, level: str, source: str | None = None) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(source) if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.INFO, root.level))
