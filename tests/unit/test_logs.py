"""The log formats: JSON lines with their fields, secrets masked; the [logging] options."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from dblog_worker.config import parse
from dblog_worker.errors import ConfigError
from dblog_worker.logs import JsonFormatter, TextFormatter, redact, setup_logging


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("dblog_worker.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream, handler
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_line_fields(capture: tuple[logging.Logger, io.StringIO, logging.Handler]) -> None:
    logger, stream, handler = capture
    handler.setFormatter(JsonFormatter("shop"))
    logger.info("dump %s started", "r1", extra={"request_id": "r1"})
    logger.warning("GET /api/v1/status 200", extra={"http_request_id": "abc-1", "status": 200})
    logger.info("plain")
    first, second, third = lines(stream)
    assert set(first) == {"ts", "level", "logger", "message", "source", "request_id"}
    assert first["message"] == "dump r1 started" and first["request_id"] == "r1"
    assert first["level"] == "info" and first["logger"] == "dblog_worker.test_logs"
    assert first["source"] == "shop"
    assert first["ts"].endswith("Z") and len(first["ts"]) == len("2026-01-01T00:00:00.000Z")
    assert second["http_request_id"] == "abc-1" and second["status"] == 200
    assert second["level"] == "warning"
    assert "request_id" not in third


def test_json_error_has_the_traceback(
        capture: tuple[logging.Logger, io.StringIO, logging.Handler]) -> None:
    logger, stream, handler = capture
    handler.setFormatter(JsonFormatter("shop"))
    try:
        raise ValueError("bad thing")
    except ValueError:
        logger.exception("it failed")
    (line,) = lines(stream)
    assert line["message"] == "it failed"
    assert "Traceback" in line["error"] and "ValueError: bad thing" in line["error"]


SECRETS = [
    ("connecting to host=db password=s3cret dbname=shop", "s3cret",
     "host=db password=*** dbname=shop"),
    ("dsn host=db password='se cret' user=x", "se cret", "password=*** user=x"),
    ("redis at redis://:hunter2@127.0.0.1:6379/0", "hunter2", "redis://:***@127.0.0.1"),
    ("mysql://dblog:pa55@db:3306 down", "pa55", "mysql://dblog:***@db:3306"),
    ("Authorization: Bearer abc.DEF-123", "abc.DEF-123", "Bearer ***"),
    ("GET /api/v1/feed?after=3&token=xyz", "xyz", "token=***"),
]


@pytest.mark.parametrize(("message", "secret", "masked"), SECRETS)
def test_secrets_are_masked_in_both_formats(
        capture: tuple[logging.Logger, io.StringIO, logging.Handler],
        message: str, secret: str, masked: str) -> None:
    logger, stream, handler = capture
    assert secret not in redact(message) and masked in redact(message)
    for formatter in (JsonFormatter("shop"), TextFormatter()):
        handler.setFormatter(formatter)
        logger.error("%s", message)
    assert secret not in stream.getvalue()
    json_line, text_line = stream.getvalue().splitlines()
    assert masked in json.loads(json_line)["message"]
    assert masked in text_line


def test_secret_extras_are_dropped(
        capture: tuple[logging.Logger, io.StringIO, logging.Handler]) -> None:
    logger, stream, handler = capture
    handler.setFormatter(JsonFormatter("shop"))
    logger.info("x", extra={"token": "t0k3n", "dsn": "password=p", "url": "redis://:pw@h/0"})
    (line,) = lines(stream)
    assert "token" not in line and "dsn" not in line
    assert line["url"] == "redis://:***@h/0"
    assert "t0k3n" not in stream.getvalue() and "pw@" not in stream.getvalue()


def test_plain_messages_are_untouched() -> None:
    text = "session ab12 streaming host=db port=5432 dbname=shop user=dblog from 0/16B3748"
    assert redact(text) == text


def test_setup_logging_installs_the_format() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("json", "warning", "shop")
        (handler,) = root.handlers
        assert isinstance(handler.formatter, JsonFormatter) and handler.formatter.source == "shop"
        assert root.level == logging.WARNING
        setup_logging("text", "debug")
        assert isinstance(root.handlers[0].formatter, TextFormatter)
        assert root.level == logging.DEBUG
        # an S3 request's headers (a session token among them) never reach the log
        assert not logging.getLogger("botocore.endpoint").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("urllib3.connectionpool").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("dblog_worker.session").isEnabledFor(logging.DEBUG)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


BASE: dict[str, Any] = {
    "source": {"name": "shop", "dsn": "host=db", "tables": ["public.t"]},
    "redis": {"url": "redis://127.0.0.1:6379/0"},
    "landing": {"path": "/tmp/landing"},
}


def test_logging_options() -> None:
    config = parse(BASE, {})
    assert (config.logs.format, config.logs.level) == ("text", "info")
    config = parse({**BASE, "logging": {"format": "JSON", "level": "Warning"}}, {})
    assert (config.logs.format, config.logs.level) == ("json", "warning")


@pytest.mark.parametrize(("section", "message"), [
    ({"format": "xml"}, 'logging.format must be one of "text", "json", got \'xml\''),
    ({"level": "loud"}, 'logging.level must be one of "debug", "info", "warning", "error"'),
    ({"level": 10}, "logging.level must be one of"),
    ({"fromat": "json"}, "unknown option logging.fromat; did you mean format?"),
])
def test_bad_logging_options_are_refused(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="^" + message.replace("?", r"\?").replace(".", r"\.")):
        parse({**BASE, "logging": section}, {})
