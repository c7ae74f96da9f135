"""The worker's configuration: TOML in, Config out, secrets from the given environment."""

from __future__ import annotations

import random
import re
import string
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dblog_worker.config import Config, SourceConfig, load, parse
from dblog_worker.config_sections import HttpConfig, LeaseConfig, token_weakness
from dblog_worker.errors import ConfigError
from dblog_worker.mysql.options import default_server_id, my_options, server_id, url_args
from dblog_worker.pg.options import RULES as PG_RULES
from dblog_worker.pg.options import PgOptions, pg_options

FULL = """
[source]
name = "shop"
kind = "postgresql"
dsn = "host=db port=5432 dbname=shop user=dblog"
password_env = "SHOP_DB_PASSWORD"
tables = ["public.orders", "public.customers", "public.orders"]
slot = "shop_slot"
publication = "shop_pub"

[redis]
url_env = "DBLOG_REDIS_URL"

[landing]
path = "/var/lib/dblog/landing"
flush_interval_s = 2.5
flush_max_events = 1000

[worker]
heartbeat_interval_s = 5
status_interval_s = 0.5
control_interval_s = 0.1
reconnect_max_s = 60
"""

MINIMAL = """
[source]
name = "shop"
dsn = "host=db dbname=shop user=dblog"
tables = ["public.orders"]

[redis]
url = "redis://127.0.0.1:6379/0"

[landing]
path = "/data/landing"
"""

PASSWORD = "s3cret-Pa55"
REDIS_URL = "redis://:r3dis-pw@cache.internal:6380/2"
ENV = {"SHOP_DB_PASSWORD": PASSWORD, "DBLOG_REDIS_URL": REDIS_URL}
SPLIT = (" (split at the first dot: a table name may contain dots, a schema or database name"
         " may not)")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "dblog.toml"
    path.write_text(text)
    return path


def data(changes: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """MINIMAL as a dict, changed: a section or a value set to None is removed."""
    result: dict[str, Any] = tomllib.loads(MINIMAL)
    for section, change in changes.items():
        if change is None:
            result.pop(section, None)
            continue
        target = result.setdefault(section, {})
        for key, value in change.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    return result


def test_full_config(tmp_path: Path) -> None:
    config = load(write(tmp_path, FULL), ENV)
    assert config == Config(
        source=SourceConfig(
            name="shop",
            kind="postgresql",
            dsn=f"user=dblog dbname=shop host=db port=5432 password={PASSWORD}",
            tables=("public.orders", "public.customers"),
            options=PgOptions(slot="shop_slot", publication="shop_pub"),
        ),
        redis_url=REDIS_URL,
        landing_path=Path("/var/lib/dblog/landing"),
        flush_interval_s=2.5,
        flush_max_events=1000,
        heartbeat_interval_s=5.0,
        status_interval_s=0.5,
        control_interval_s=0.1,
        reconnect_max_s=60.0,
    )
    assert isinstance(config.flush_max_events, int)
    assert config.source.safe_dsn() == "user=dblog dbname=shop host=db port=5432"


def test_defaults(tmp_path: Path) -> None:
    config = load(write(tmp_path, MINIMAL), {})
    assert config == Config(
        source=SourceConfig(
            name="shop",
            kind="postgresql",
            dsn="host=db dbname=shop user=dblog",
            tables=("public.orders",),
            options=PgOptions(slot="dblog_shop", publication="dblog_shop"),
        ),
        redis_url="redis://127.0.0.1:6379/0",
        landing_path=Path("/data/landing"),
        flush_interval_s=1.0,
        flush_max_events=50_000,
        heartbeat_interval_s=10.0,
        status_interval_s=1.0,
        control_interval_s=0.2,
        reconnect_max_s=30.0,
    )


def test_load_reads_the_process_environment_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBLOG_TEST_REDIS_URL", REDIS_URL)
    text = MINIMAL.replace('url = "redis://127.0.0.1:6379/0"', 'url_env = "DBLOG_TEST_REDIS_URL"')
    assert load(write(tmp_path, text)).redis_url == REDIS_URL


@pytest.mark.parametrize(
    ("changes", "env", "attribute", "expected"),
    [
        pytest.param(
            {"source": {"dsn_env": "SHOP_DSN"}}, {"SHOP_DSN": "host=other dbname=x"},
            "dsn", "host=other dbname=x", id="dsn_env",
        ),
        pytest.param(
            {"source": {"dsn_env": "SHOP_DSN", "password_env": "PW"}},
            {"SHOP_DSN": "host=other dbname=x", "PW": "a b'c"},
            "dsn", "dbname=x host=other password='a b\\'c'", id="dsn_env-and-password_env",
        ),
        pytest.param(
            {"source": {"password_env": "PW"}}, {"PW": "pw"},
            "dsn", "user=dblog dbname=shop host=db password=pw", id="password_env",
        ),
        pytest.param(
            {"redis": {"url_env": "RURL"}}, {"RURL": REDIS_URL},
            "redis_url", REDIS_URL, id="url_env",
        ),
        pytest.param(
            {"redis": {"url": "redis://a/0", "url_env": "RURL"}}, {"RURL": "redis://b/1"},
            "redis_url", "redis://b/1", id="url_env-wins-over-url",
        ),
    ],
)
def test_secrets_from_the_environment(
    changes: dict[str, dict[str, Any]], env: dict[str, str], attribute: str, expected: str
) -> None:
    config = parse(data(changes), env)
    value = config.source.dsn if attribute == "dsn" else config.redis_url
    assert value == expected


def test_tables_deduplicated_in_order() -> None:
    config = parse(data({"source": {"tables": ["s.b", "s.a", "s.b", "s.c", "s.a"]}}), {})
    assert config.source.tables == ("s.b", "s.a", "s.c")


HOSTILE_TABLES = ['public.disc%', 'public.a%sb', 'public.%%', 'public.x"y', 'public.a`b',
                  'public.with space', 'public.dot.ted', 'public.naïve ünïcode ☃',
                  'public.select', 'sch "%s".order', 'public."', "public." + "x" * 63,
                  "public.émoji 😀 ", "x" * 63 + ".t"]


def test_tables_with_any_name_are_accepted() -> None:
    """Names are quoted wherever they go: any character but NUL, up to the database's limit
    (PostgreSQL 63 bytes; MySQL 64 characters, no trailing space, no emoji)."""
    config = parse(data({"source": {"tables": HOSTILE_TABLES}}), {})
    assert config.source.tables == tuple(HOSTILE_TABLES)
    mysql = [t.replace("public.", "shop.", 1) for t in HOSTILE_TABLES[:-2]]
    mysql += ["s." + "x" * 64, "s." + "ü" * 40]
    config = parse(data({"source": {"kind": "mariadb", "dsn": "mysql://u@h:3306",
                                    "tables": mysql}}), {})
    assert config.source.tables == tuple(mysql)


@pytest.mark.parametrize("name", ["s", "shop_2", "a" * 40, "x1_"])
def test_good_source_names(name: str) -> None:
    config = parse(data({"source": {"name": name}}), {})
    assert (config.source.name, pg_options(config.source).slot) == (name, f"dblog_{name}")


@pytest.mark.parametrize(
    ("changes", "env", "message"),
    [
        pytest.param({"source": None}, {}, "the configuration needs a [source] section",
                     id="no-source"),
        pytest.param({"redis": None}, {}, "the configuration needs a [redis] section",
                     id="no-redis"),
        pytest.param({"landing": None}, {}, "the configuration needs a [landing] section",
                     id="no-landing"),
        pytest.param({"source": {"name": ""}}, {}, "source.name must be a non-empty string",
                     id="empty-name"),
        pytest.param({"source": {"name": 5}}, {}, "source.name must be a non-empty string",
                     id="numeric-name"),
        *[
            pytest.param(
                {"source": {"name": bad}}, {},
                f"source.name {bad!r} must be 1-40 characters of a-z, 0-9 and _, starting with "
                "a letter (it names the Redis keys, the landing folder and what the source "
                "keeps for capture, such as a replication slot)",
                id=f"bad-name-{bad}",
            )
            for bad in ["Shop", "1shop", "_shop", "shop-eu", "shop.eu", "a" * 41, "shop\n"]
        ],
        pytest.param({"source": {"kind": "oracle"}}, {},
                     "source.kind 'oracle' is not supported; use one of \"postgresql\", "
                     "\"mysql\", \"mariadb\"", id="kind"),
        pytest.param({"source": {"kind": "mysql", "dsn": "host=db user=x"}}, {},
                     'source.dsn: a MySQL DSN is a URL like mysql://user@host:3306 '
                     '(source.kind is "mysql")', id="mysql-libpq-dsn"),
        pytest.param({"source": {"kind": "mysql", "dsn": "mysql://u@db:3306/shop"}}, {},
                     "source.dsn: a MySQL DSN names no database: mysql://user@host:3306; a "
                     'password holding / ? or # is percent-encoded (source.kind is "mysql")',
                     id="mysql-database-in-dsn"),
        pytest.param({"source": {"kind": "mysql", "dsn": "mysql://dblog@db", "server_id": 0}},
                     {}, "server_id must be an integer from 1 to 4294967295, got 0",
                     id="server-id"),
        pytest.param({"source": {"server_id": 7}}, {},
                     "source.server_id is an option of MySQL/MariaDB sources; this source is "
                     "postgresql: remove it, or set source.kind", id="server-id-on-postgresql"),
        pytest.param({"source": {"kind": "mysql", "dsn": "mysql://dblog@db", "slot": "s"}}, {},
                     "source.slot is an option of PostgreSQL sources; this source is mysql: "
                     "remove it, or set source.kind",
                     id="slot-on-mysql"),
        pytest.param({"source": {"dsn": None}}, {}, "source.dsn must be a non-empty string",
                     id="no-dsn"),
        pytest.param({"source": {"dsn": "host=db port"}}, {},
                     "source.dsn is not a valid libpq connection string: ", id="bad-dsn"),
        pytest.param({"source": {"tables": []}}, {},
                     'source.tables must be a non-empty list like ["public.orders"] or ["shop.*"]',
                     id="empty-tables"),
        pytest.param({"source": {"tables": None}}, {},
                     'source.tables must be a non-empty list like ["public.orders"] or ["shop.*"]',
                     id="no-tables"),
        pytest.param({"source": {"tables": "public.orders"}}, {},
                     'source.tables must be a non-empty list like ["public.orders"] or ["shop.*"]',
                     id="tables-string"),
        pytest.param({"source": {"tables": ["public.a", 1]}}, {},
                     'source.tables must be a non-empty list like ["public.orders"] or ["shop.*"]',
                     id="tables-number"),
        pytest.param({"source": {"tables": ["public.a", "orders"]}}, {},
                     "source.tables: 'orders' must be qualified: schema.table"
                     + SPLIT,
                     id="unqualified"),
        pytest.param({"source": {"tables": ["public."]}}, {},
                     "source.tables: 'public.' must be qualified: schema.table"
                     + SPLIT,
                     id="empty-table-name"),
        pytest.param({"source": {"tables": [".orders"]}}, {},
                     "source.tables: '.orders' must be qualified: schema.table"
                     + SPLIT,
                     id="empty-schema-name"),
        pytest.param({"source": {"tables": ["public." + "é" * 32]}}, {},
                     f"source.tables: 'public.{'é' * 32}': '{'é' * 32}': PostgreSQL names are at"
                     " most 63 bytes (it truncates longer ones); this one has 64",
                     id="pg-name-64-bytes"),
        pytest.param({"source": {"tables": ["public.a\x00b"]}}, {},
                     "source.tables: 'public.a\\x00b': 'a\\x00b': a name cannot contain NUL",
                     id="nul"),
        pytest.param({"source": {"kind": "mariadb", "dsn": "mysql://u@h:3306",
                                 "tables": ["shop.t\n"]}}, {},
                     "source.tables: 'shop.t\\n': 't\\n': MySQL/MariaDB names cannot end with a"
                     " space (or other white space)", id="mysql-trailing-space"),
        pytest.param({"source": {"kind": "mariadb", "dsn": "mysql://u@h:3306",
                                 "tables": ["shop." + "x" * 65]}}, {},
                     f"source.tables: 'shop.{'x' * 65}': '{'x' * 65}': MySQL/MariaDB names are"
                     " at most 64 characters; this one has 65", id="mysql-65-characters"),
        pytest.param({"source": {"kind": "mariadb", "dsn": "mysql://u@h:3306",
                                 "tables": ["shop.a😀"]}}, {},
                     "source.tables: 'shop.a😀': 'a😀': MySQL/MariaDB names hold only characters"
                     " of the Basic Multilingual Plane (no emoji)", id="mysql-emoji"),
        pytest.param({"source": {"tables": ["漢字" * 8 + "." + "漢字" * 8]}}, {},
                     f"source.tables: '{'漢字' * 8}.{'漢字' * 8}': the directory name of table"
                     f" '{'漢字' * 8}'.'{'漢字' * 8}' would be 289 bytes, over the filesystem"
                     " limit of 255; rename the table or schema", id="landing-directory"),
        pytest.param({"source": {"dsn_env": "NOPE"}}, {},
                     "source.dsn_env names NOPE, which is not set", id="dsn_env-unset"),
        pytest.param({"source": {"password_env": "NOPE"}}, {},
                     "source.password_env names NOPE, which is not set",
                     id="password_env-unset"),
        pytest.param({"redis": {"url_env": "NOPE"}}, {"OTHER": "x"},
                     "redis.url_env names NOPE, which is not set", id="url_env-unset"),
        pytest.param({"redis": {"url": ""}}, {}, "redis.url must be a non-empty string",
                     id="empty-url"),
        pytest.param({"landing": {"path": None}}, {}, "landing.path must be a non-empty string",
                     id="no-path"),
        pytest.param({"landing": {"flush_interval_s": "1"}}, {},
                     "flush_interval_s must be a number from 0.01 to 60, got '1'",
                     id="flush-interval-string"),
        pytest.param({"landing": {"flush_interval_s": 0}}, {},
                     "flush_interval_s must be a number from 0.01 to 60, got 0",
                     id="flush-interval-zero"),
        pytest.param({"landing": {"flush_interval_s": 60.5}}, {},
                     "flush_interval_s must be a number from 0.01 to 60, got 60.5",
                     id="flush-interval-high"),
        pytest.param({"landing": {"flush_max_events": True}}, {},
                     "flush_max_events must be an integer from 1 to 10000000, got True",
                     id="flush-max-bool"),
        pytest.param({"landing": {"flush_max_events": 0}}, {},
                     "flush_max_events must be an integer from 1 to 10000000, got 0",
                     id="flush-max-zero"),
        pytest.param({"landing": {"flush_max_events": 10_000_001}}, {},
                     "flush_max_events must be an integer from 1 to 10000000, got 10000001",
                     id="flush-max-high"),
        pytest.param({"worker": {"heartbeat_interval_s": 3601}}, {},
                     "heartbeat_interval_s must be a number from 0.1 to 3600, got 3601",
                     id="heartbeat-high"),
        pytest.param({"worker": {"status_interval_s": 0.05}}, {},
                     "status_interval_s must be a number from 0.1 to 60, got 0.05",
                     id="status-low"),
        pytest.param({"worker": {"control_interval_s": [1]}}, {},
                     "control_interval_s must be a number from 0.01 to 10, got [1]",
                     id="control-list"),
        pytest.param({"worker": {"reconnect_max_s": -1}}, {},
                     "reconnect_max_s must be a number from 0.1 to 600, got -1",
                     id="reconnect-negative"),
    ],
)
def test_errors(
    changes: dict[str, dict[str, Any] | None], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse(data(changes), env)
    if message.endswith(": "):
        assert str(info.value).startswith(message)
    else:
        assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('source = "shop"\n[redis]\nurl = "x"\n[landing]\npath = "p"\n',
         "the configuration needs a [source] section"),
        ("worker = 5\n" + MINIMAL, "worker"),
    ],
)
def test_sections_that_are_not_tables(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(write(tmp_path, text), {})


@pytest.mark.parametrize(
    ("low", "high", "key", "section"),
    [
        (0.01, 60, "flush_interval_s", "landing"),
        (1, 10_000_000, "flush_max_events", "landing"),
        (0.1, 3600, "heartbeat_interval_s", "worker"),
        (0.1, 60, "status_interval_s", "worker"),
        (0.01, 10, "control_interval_s", "worker"),
        (0.1, 600, "reconnect_max_s", "worker"),
    ],
)
def test_number_bounds_are_inclusive(low: float, high: float, key: str, section: str) -> None:
    for value in (low, high):
        config = parse(data({section: {key: value}}), {})
        assert getattr(config, key) == value


def test_invalid_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[source\nname = 'shop'\n")
    with pytest.raises(ConfigError) as info:
        load(path, {})
    assert str(info.value).startswith(f"configuration file {path} is not valid TOML: ")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load(path, {})
    assert str(info.value) == f"configuration file {path} does not exist"


@pytest.mark.parametrize(
    ("dsn", "redacted"),
    [
        ("host=db user=u password=secret dbname=x", "user=u dbname=x host=db"),
        ("password='a b' host=h", "host=h"),
        ("host=db dbname=x", "dbname=x host=db"),
        ("postgresql://u:secret@db:5433/x?sslmode=require",
         "user=u dbname=x host=db port=5433 sslmode=require"),
        ("postgresql://u@db/x?password=secret&application_name=a",
         "user=u dbname=x host=db application_name=a"),
        ("", ""),
        ("host=db port", "<unparseable dsn>"),
        ("password=secret host=db port", "<unparseable dsn>"),
    ],
)
def test_redact_dsn(dsn: str, redacted: str) -> None:
    assert PG_RULES.redact(dsn) == redacted
    assert "secret" not in PG_RULES.redact(dsn)


def test_repr_hides_secrets(tmp_path: Path) -> None:
    config = load(write(tmp_path, FULL), ENV)
    for text in (repr(config), str(config), repr(config.source)):
        assert PASSWORD not in text
        assert REDIS_URL not in text
        assert "r3dis-pw" not in text
        assert "cache.internal" not in text
    assert "shop_slot" in repr(config)  # the rest is still shown


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[landing]\npath = 'x'\nflush_intervall_s = 1\n",
         "unknown option landing.flush_intervall_s; did you mean flush_interval_s?"),
        ("[sourc]\nname = 'x'\n", "unknown section [sourc]; did you mean source?"),
    ],
)
def test_misspelt_options_are_refused(extra: str, message: str) -> None:
    text = "[source]\nname='shop'\ndsn='host=x'\ntables=['public.t']\n[redis]\nurl='redis://x'\n"
    if "[landing]" not in extra:
        text += "[landing]\npath='x'\n"
    data = tomllib.loads(text + extra)
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(data, {})


MYSQL = """
[source]
name = "shop"
kind = "mariadb"
dsn = "mysql://dblog@db.internal:3307"
password_env = "SHOP_DB_PASSWORD"
tables = ["shop.orders", "billing.invoices"]
server_id = 4242

[redis]
url = "redis://127.0.0.1:6379/0"

[landing]
path = "/data/landing"
"""


def test_mysql_source(tmp_path: Path) -> None:
    source = load(write(tmp_path, MYSQL), ENV).source
    assert (source.kind, source.tables, server_id(source)) == (
        "mysql", ("shop.orders", "billing.invoices"), 4242)
    assert url_args(source.dsn) == {
        "host": "db.internal", "port": 3307, "user": "dblog", "password": PASSWORD,
    }
    assert source.safe_dsn() == "mysql://dblog@db.internal:3307"
    assert PASSWORD not in repr(source)


def test_mysql_password_with_url_characters(tmp_path: Path) -> None:
    odd = "p@ss:w/rd%?"
    source = load(write(tmp_path, MYSQL), {"SHOP_DB_PASSWORD": odd}).source
    assert url_args(source.dsn)["password"] == odd
    assert odd not in source.safe_dsn()


def test_server_id_defaults_to_one_per_source_name() -> None:
    assert default_server_id("shop") == default_server_id("shop")
    assert default_server_id("shop") != default_server_id("billing")
    assert 1_000_000_000 <= default_server_id("shop") < 2_000_000_000


# -- [http] ----------------------------------------------------------------------------

HTTP_TOKEN = "tok-9f8e7d6c5b4a"
ANY_ADDRESS = "0.0.0.0"  # noqa: S104 (only parsed here; nothing binds)


def test_http_defaults_to_loopback_without_a_token() -> None:
    http = parse(data({}), {}).http
    assert http == HttpConfig(enabled=True, host="127.0.0.1", port=8750, token=None,
                              token_env="DBLOG_HTTP_TOKEN")
    assert http.listen == "127.0.0.1:8750"


@pytest.mark.parametrize(
    ("section", "env", "expected"),
    [
        ({"listen": "127.0.0.1:0"}, {}, HttpConfig(port=0)),
        ({"listen": "localhost:9000"}, {}, HttpConfig(host="localhost", port=9000)),
        ({"listen": "[::1]:9000"}, {}, HttpConfig(host="::1", port=9000)),
        ({}, {"DBLOG_HTTP_TOKEN": HTTP_TOKEN}, HttpConfig(token=HTTP_TOKEN)),
        ({"listen": f"{ANY_ADDRESS}:8750"}, {"DBLOG_HTTP_TOKEN": f" {HTTP_TOKEN}\n"},
         HttpConfig(host=ANY_ADDRESS, token=HTTP_TOKEN)),
        ({"listen": "10.1.2.3:80", "token_env": "MY_TOKEN"}, {"MY_TOKEN": HTTP_TOKEN},
         HttpConfig(host="10.1.2.3", port=80, token=HTTP_TOKEN, token_env="MY_TOKEN")),
        ({"listen": f"{ANY_ADDRESS}:8750", "enabled": False}, {},
         HttpConfig(enabled=False, host=ANY_ADDRESS)),
        ({"enabled": False, "token_env": "UNSET"}, {},
         HttpConfig(enabled=False, token_env="UNSET")),
    ],
)
def test_http(section: dict[str, Any], env: dict[str, str], expected: HttpConfig) -> None:
    assert parse(data({"http": section}), env).http == expected


@pytest.mark.parametrize(
    ("section", "env", "message"),
    [
        ({"listen": "0.0.0.0:8750"}, {},
         "http.listen '0.0.0.0:8750' is not a loopback address, so the HTTP API needs a "
         "token: set DBLOG_HTTP_TOKEN (e.g. to the output of `openssl rand -hex 32`), or "
         'listen on "127.0.0.1:8750", or set http.enabled = false'),
        ({"listen": "dblog.internal:8750"}, {}, "is not a loopback address"),
        ({"listen": "127.0.0.1:8750", "token_env": "MY_TOKEN"}, {},
         "http.token_env names MY_TOKEN, which is not set"),
        ({}, {"DBLOG_HTTP_TOKEN": " "}, "http.token_env names DBLOG_HTTP_TOKEN, which is empty"),
        ({}, {"DBLOG_HTTP_TOKEN": "two words"}, "which is empty or holds spaces"),
        ({"token_env": ""}, {}, "http.token_env must name an environment variable"),
        ({"enabled": "yes"}, {}, "http.enabled must be true or false, got 'yes'"),
        ({"listen": 8750}, {}, 'http.listen must be "host:port", like "127.0.0.1:8750" or '
                              '"[::1]:8750", got 8750'),
        ({"listen": "127.0.0.1"}, {}, "with a port from 0 to 65535, got '127.0.0.1'"),
        ({"listen": ":8750"}, {}, "with a port from 0 to 65535, got ':8750'"),
        ({"listen": "127.0.0.1:65536"}, {}, "with a port from 0 to 65535"),
        ({"listen": "127.0.0.1:-1"}, {}, "with a port from 0 to 65535"),
        ({"listen": "::1:8750"}, {}, "(an IPv6 address goes in brackets)"),
        ({"listen": "[nope]:8750"}, {}, "'nope' is not an IPv6 address"),
        ({"listen": "a b:1"}, {}, "(an IPv6 address goes in brackets)"),
        ({"listn": "127.0.0.1:1"}, {}, "unknown option http.listn; did you mean listen?"),
    ],
)
def test_http_errors(section: dict[str, Any], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(data({"http": section}), env)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("listen", "token", "weak"),
    [
        (f"{ANY_ADDRESS}:8750", "change-me-http-token",
         "is the example's token (.env.example) or a placeholder, which anyone can read"),
        (f"{ANY_ADDRESS}:8750", "CHANGE-ME-HTTP-TOKEN",
         "is the example's token (.env.example) or a placeholder, which anyone can read"),
        (f"{ANY_ADDRESS}:8750", "Change_Me_Http_Token",
         "is the example's token (.env.example) or a placeholder, which anyone can read"),
        (f"{ANY_ADDRESS}:8750", "changeme-0a9f3c02d1",
         "is the example's token (.env.example) or a placeholder, which anyone can read"),
        (f"{ANY_ADDRESS}:8750", "aaaaaaaaaaaaaaaa", "repeats a pattern of 1 character(s)"),
        (f"{ANY_ADDRESS}:8750", "x" * 40, "repeats a pattern of 1 character(s)"),
        (f"{ANY_ADDRESS}:8750", "abc1" * 5, "repeats a pattern of 4 character(s)"),
        (f"{ANY_ADDRESS}:8750", "abcdefghijklmnopq", "is a run of consecutive characters"),
        (f"{ANY_ADDRESS}:8750", "1111222233334444",
         "has too little randomness (4 distinct characters; a random token has many)"),
        (f"{ANY_ADDRESS}:8750", "aaaaaaaaaaaaaaab",
         "has too little randomness (2 distinct characters; a random token has many)"),
        ("10.1.2.3:8750", "x" * 15, "is 15 bytes long, shorter than 16"),
        ("dblog.internal:8750", "abc", "is 3 bytes long, shorter than 16"),
        ("[2001:db8::1]:8750", " short-token-14\n", "is 14 bytes long, shorter than 16"),
    ],
)
def test_a_weak_token_is_refused_off_loopback(listen: str, token: str, weak: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(data({"http": {"listen": listen}}), {"DBLOG_HTTP_TOKEN": token})
    message = str(info.value)
    assert message == (
        f"http.listen {listen!r} is not a loopback address and the token in DBLOG_HTTP_TOKEN "
        f"{weak}: anyone who can reach the port could guess it. Set DBLOG_HTTP_TOKEN to a "
        "random token of at least 16 bytes, e.g. the output of `python3 -c 'import secrets; "
        "print(secrets.token_urlsafe(32))'`, or listen on \"127.0.0.1:8750\"")
    assert token.strip() not in message.replace("DBLOG_HTTP_TOKEN", "")


@pytest.mark.parametrize(
    ("listen", "token"),
    [
        ("127.0.0.1:8750", "abc"),  # loopback: only this machine can try
        ("[::1]:8750", "change-me-http-token"),
        ("localhost:8750", "x"),
        (f"{ANY_ADDRESS}:8750", "2a321f118759ef5e"),  # 16 random bytes: the shortest taken
        (f"{ANY_ADDRESS}:8750", "RCxmakObjKoEkY_NeSxarXgUc_R1qXmy70ghJ9i-z-Y"),
    ],
)
def test_token_strength_rules_apply_off_loopback_only(listen: str, token: str) -> None:
    assert parse(data({"http": {"listen": listen}}), {"DBLOG_HTTP_TOKEN": token}).http.token \
        == token


def test_a_disabled_api_takes_any_token() -> None:
    http = parse(data({"http": {"listen": f"{ANY_ADDRESS}:8750", "enabled": False}}),
                 {"DBLOG_HTTP_TOKEN": "abc"}).http
    assert not http.enabled


def test_http_token_is_not_in_repr() -> None:
    config = parse(data({"http": {}}), {"DBLOG_HTTP_TOKEN": HTTP_TOKEN})
    assert config.http.token == HTTP_TOKEN
    assert HTTP_TOKEN not in repr(config)
    assert HTTP_TOKEN not in str(config.http)


def test_example_configuration_loads() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "worker.toml"
    config = load(path, {"SHOP_DB_PASSWORD": "x", "REPLICA_DB_PASSWORD": "y"})
    assert config.http == HttpConfig()


def test_lease_defaults_and_settings() -> None:
    default = parse(data({}), {})
    assert default.lease == LeaseConfig(ttl_s=5.0, renew_interval_s=1.0, standby_poll_s=0.5)
    assert default.shutdown_timeout_s == 30.0
    # A short lease renews three times per lease unless told otherwise.
    assert parse(data({"lease": {"ttl_s": 1.5}}), {}).lease.renew_interval_s == 0.5
    config = parse(data({"lease": {"ttl_s": 10, "renew_interval_s": 2, "standby_poll_s": 0.2},
                         "worker": {"shutdown_timeout_s": 60}}), {})
    assert config.lease == LeaseConfig(ttl_s=10.0, renew_interval_s=2.0, standby_poll_s=0.2)
    assert config.shutdown_timeout_s == 60.0


@pytest.mark.parametrize(("changes", "message"), [
    ({"lease": {"ttl_s": 4, "renew_interval_s": 3}},
     "lease.renew_interval_s (3.0) must be at most half of lease.ttl_s (4.0): a leader renews at "
     "least twice per lease, or a standby takes over from a healthy leader"),
    ({"lease": {"ttl_s": 0.1}}, "ttl_s must be a number from 0.5 to 600, got 0.1"),
    ({"lease": {"standby_poll_s": 0}}, "standby_poll_s must be a number from 0.05 to 60, got 0"),
    ({"lease": {"ttl": 5}}, "unknown option lease.ttl; did you mean ttl_s?"),
    ({"worker": {"shutdown_timeout_s": 0}},
     "shutdown_timeout_s must be a number from 1 to 3600, got 0"),
])
def test_lease_errors(changes: dict[str, dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(data(changes), {})


def test_lease_section_must_be_a_table() -> None:
    changed = data({})
    changed["lease"] = 5
    with pytest.raises(ConfigError, match=re.escape("[lease] must be a table of options")):
        parse(changed, {})


REPLICA = MINIMAL + """
[source.replica]
dsn = "host=replica.internal dbname=shop user=dblog_reader"
password_env = "REPLICA_PASSWORD"
max_wait_ms = 250
"""


def test_a_read_replica(tmp_path: Path) -> None:
    source = load(write(tmp_path, REPLICA), {"REPLICA_PASSWORD": "r3pl1ca"}).source
    assert source.replica is not None
    assert source.replica.max_wait_ms == 250
    assert "password=r3pl1ca" in source.replica.dsn
    assert "r3pl1ca" not in repr(source) and "r3pl1ca" not in source.replica.safe_dsn(source.kind)
    assert load(write(tmp_path, MINIMAL), {}).source.replica is None
    defaults = parse(data({"source": {"replica": {"dsn": "host=r"}}}), {}).source.replica
    assert defaults is not None and defaults.max_wait_ms == 1000


@pytest.mark.parametrize(("replica", "kind", "message"), [
    ({"dsn": "host=r", "max_wait": 5}, "postgresql",
     "unknown option source.replica.max_wait; did you mean max_wait_ms?"),
    ({"dsn": "host=r", "max_wait_ms": 0}, "postgresql",
     "source.replica.max_wait_ms must be an integer from 1"),
    ({"max_wait_ms": 10}, "postgresql", "source.replica.dsn"),
    ("host=r", "postgresql", "source.replica must be a table"),
    ({"dsn": "host=r"}, "mariadb", "source.replica.dsn"),  # a MySQL URL, not a libpq string
])
def test_bad_replicas_are_refused(replica: object, kind: str, message: str) -> None:
    changes: dict[str, Any] = {"source": {"replica": replica, "kind": kind}}
    if kind == "mariadb":
        changes["source"].update(dsn="mysql://db", tables=["shop.orders"])
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(data(changes), {})


def test_a_mariadb_read_replica(tmp_path: Path) -> None:
    text = MYSQL + '\n[source.replica]\ndsn = "mysql://dblog@replica.internal:3306"\n'
    source = load(write(tmp_path, text), ENV).source
    assert source.replica is not None
    assert url_args(source.replica.dsn)["host"] == "replica.internal"


def test_watermark_modes() -> None:
    assert pg_options(parse(data({}), {}).source).watermarks == "table"
    source = parse(data({"source": {"watermarks": "message"}}), {}).source
    assert pg_options(source).watermarks == "message" and not pg_options(source).watermark_table
    with pytest.raises(ConfigError, match=re.escape("source.watermarks must be one of table, "
                                                    "message")):
        parse(data({"source": {"watermarks": "messages"}}), {})
    mariadb = {"kind": "mariadb", "dsn": "mysql://db", "tables": ["shop.orders"]}
    assert my_options(parse(data({"source": mariadb}), {}).source).watermark_table
    source = parse(data({"source": {**mariadb, "watermarks": "position"}}), {}).source
    assert my_options(source).watermarks == "position"
    with pytest.raises(ConfigError, match=re.escape("source.watermarks must be one of table, "
                                                    "position")):
        parse(data({"source": {**mariadb, "watermarks": "message"}}), {})
    with pytest.raises(ConfigError, match=re.escape('source.watermarks = "position" reads '
                                                    "each chunk in a consistent snapshot")):
        parse(data({"source": {**mariadb, "watermarks": "position",
                               "replica": {"dsn": "mysql://replica"}}}), {})


def test_random_tokens_are_taken() -> None:
    """What `secrets.token_hex(8)` or `token_urlsafe` make is never refused (the rules'
    false refusals are for tokens a person typed)."""
    chosen = random.Random(29)
    alphabets = ("0123456789abcdef", string.ascii_letters + string.digits + "-_")
    for _ in range(5000):
        for alphabet in alphabets:
            token = "".join(chosen.choice(alphabet) for _ in range(16))
            assert token_weakness(token) is None, token


@pytest.mark.parametrize("dsn", [
    "host=db port=5432 dbname=shop user=dblog",
    "host=a,b port=5432,5433 target_session_attrs=read-write",
    "host=a,b,c port=5432",
    "host=a,b port=",
    "hostaddr=10.0.0.5,::1 port=5432,5433",
    "host=db connect_timeout=10 keepalives=1 keepalives_idle=30 keepalives_interval=5 "
    "keepalives_count=3 tcp_user_timeout=0",
    "host=db sslmode=verify-full sslrootcert=system sslnegotiation=direct sslsni=1 "
    "ssl_min_protocol_version=TLSv1.2 sslcompression=0",
    "host=db require_auth=scram-sha-256 channel_binding=require gssencmode=disable",
    "host=db require_auth=!password,!md5 load_balance_hosts=random",
    "postgresql://u@db:5433,db2:5434/shop?sslmode=require&connect_timeout=5",
    "postgresql:///shop?host=/var/run/postgresql",
    "service=shop",
])
def test_dsns_libpq_takes_are_taken(dsn: str) -> None:
    parse(data({"source": {"dsn": dsn}}), {})


@pytest.mark.parametrize(("dsn", "message"), [
    ("host=db port=abc", "source.dsn: option port must be a number from 1 to 65535"),
    ("postgresql://u@db:99999/shop", "source.dsn: option port must be a number"),
    ("host=a,b port=1,2,3", "source.dsn: option port lists 3 ports and host 2 host(s)"),
    ("host=db connect_timeout=1.5", "source.dsn: option connect_timeout must be a whole"),
    ("host=db keepalives=yes", "source.dsn: option keepalives must be a whole number"),
    ("host=db sslmode=true", "source.dsn: option sslmode must be one of disable, allow"),
    ("host=db require_auth=md5,!password", "source.dsn: option require_auth must be"),
    ("hostaddr=db.internal", "source.dsn: option hostaddr must be IP addresses"),
    ("host=db replication=database", "source.dsn: option replication is set by dblog"),
    ("host=db sslmod=require", "unknown option 'sslmod'; did you mean sslmode?"),
    ("postgresql://u@db/shop?conect_timeout=3",
     "unknown option 'conect_timeout'; did you mean connect_timeout?"),
    ("host=db password=se cret=x",
     "an unknown option follows option password: if the value of password holds a space, "
     "quote it (password='…')"),
    ("host=db password='se cret' sslmod=x", "unknown option 'sslmod'; did you mean sslmode?"),
])
def test_libpq_option_values_are_checked_when_the_file_is_read(dsn: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(data({"source": {"dsn": dsn}}), {})
    assert message in str(info.value)
    assert "cret" not in str(info.value) and "abc" not in str(info.value)
