"""Secrets of a PostgreSQL DSN never printed: every libpq option that holds one
(``password``, ``sslpassword``, ``oauth_client_secret``, ``scram_client_key``,
``scram_server_key``, and ``options``, which may carry any setting) stays out of what
``dblog preflight`` prints, of the worker's log (text and JSON) and of ``dblog verify``'s
error (which Airflow shows in task logs and XCom). A DSN is shown with the options known
to be safe only (an allowlist: docs/configuration.md)."""

from __future__ import annotations

import base64
from pathlib import Path

import psycopg
import pytest

from dblog_worker.pg.dsn import SAFE_KEYS, keywords, secret_keywords
from dblog_worker.pg.options import RULES
from tests.integration.harness import Workers, cli, create_test_table, write_config
from tests.services import free_port

SCRAM_KEY = base64.b64encode(b"scram-key-Kq7e-" * 2 + b"xy").decode()  # 32 bytes
SECRETS = {
    "password": "Pw-Kq7e", "sslpassword": "SslPw-Kq7e", "oauth_client_secret": "Oauth-Kq7e",
    "scram_client_key": SCRAM_KEY, "scram_server_key": SCRAM_KEY,
    "options": "'-c application_name=Opt-Kq7e'",
}
MARKS = ("Kq7e", SCRAM_KEY, "scram-key")


def with_secrets(dsn: str) -> str:
    return dsn + "".join(f" {name}={value}" for name, value in SECRETS.items())


def assert_no_secret(text: str) -> None:
    assert not any(mark in text for mark in MARKS), text


def test_every_option_libpq_marks_secret_is_tested_and_never_safe() -> None:
    assert secret_keywords() - {"replication", "sslkeylogfile"} <= set(SECRETS)
    assert not SAFE_KEYS & secret_keywords()
    assert keywords() >= SAFE_KEYS  # every safe key is one this libpq knows


@pytest.mark.parametrize("option", sorted(keywords() - SAFE_KEYS - {"replication"}))
def test_each_option_not_known_safe_is_left_out(option: str) -> None:
    shown = RULES.redact(f"host=db user=u {option}=Value-Kq7e")
    assert shown == "user=u host=db", (option, shown)


def test_the_url_form_is_redacted_alike() -> None:
    url = ("postgresql://u:Pw-Kq7e@db:5433/shop?sslpassword=SslPw-Kq7e&sslmode=require"
           "&oauth_client_secret=Oauth-Kq7e&application_name=app")
    assert RULES.redact(url) == ("user=u dbname=shop host=db port=5433 application_name=app "
                                 "sslmode=require")


def test_preflight_worker_log_and_verify_show_no_secret(
        tmp_path: Path, pg_dsn: str, redis_url: str) -> None:
    table = "public.items"
    create_test_table(pg_dsn, table, rows=3)
    with psycopg.connect(with_secrets(pg_dsn)) as conn:  # libpq takes them all
        conn.execute("SELECT 1")
    target = f"host=127.0.0.1 port={free_port()} dbname=t user=m"
    config = write_config(tmp_path, with_secrets(pg_dsn), redis_url, [table],
                          extra=f'[target]\ndsn = "{with_secrets(target)}"\n')

    preflight = cli(config, "preflight")
    assert " is ready: 1 table(s)" in preflight.stdout, preflight.stdout
    assert "host=127.0.0.1" in preflight.stdout
    assert_no_secret(preflight.stdout + preflight.stderr)

    for log_format in ("text", "json"):
        with Workers(tmp_path / f"worker-{log_format}.log") as workers:
            worker = workers.start(config, "--log-format", log_format)
            assert worker.stop() == 0, worker.log()
            assert " streaming " in worker.log() and "host=127.0.0.1" in worker.log()
            assert_no_secret(worker.log())

    verify = cli(config, "verify", check=False)
    assert verify.returncode == 3, verify.stdout + verify.stderr
    assert verify.stderr.startswith("error: the target database (user=m dbname=t "
                                    "host=127.0.0.1 port="), verify.stderr
    assert_no_secret(verify.stdout + verify.stderr)
