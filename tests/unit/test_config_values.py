"""Any value of any TOML type in any option of the configuration: it loads, or ConfigError
names the option. Never a TypeError, AttributeError, KeyError or ValueError from deep
inside (the CLI prints ConfigError as one ``error:`` line; anything else is a traceback)."""

from __future__ import annotations

import copy
import tomllib
from datetime import UTC
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dblog_worker import kinds
from dblog_worker.config import KNOWN, REPLICA_OPTIONS, Config, parse
from dblog_worker.errors import ConfigError

COMMON = """
[redis]
url = "redis://127.0.0.1:6379/0"

[landing]
path = "/data/landing"
format = "parquet"
flush_interval_s = 1.0
flush_max_events = 1000

[worker]
heartbeat_interval_s = 10.0
status_interval_s = 1.0
control_interval_s = 0.2
reconnect_max_s = 30.0
shutdown_timeout_s = 30.0

[lease]
ttl_s = 5.0
renew_interval_s = 1.0
standby_poll_s = 0.5

[merge]
master = "local[2]"
jars = ["/usr/share/java/postgresql.jar"]
batch_max_events = 1000
tombstone_retention_h = 24.0
parallel_tables = 2
spark_conf = { "spark.driver.memory" = "1g" }

[http]
listen = "127.0.0.1:8750"
enabled = true
token_env = "DBLOG_HTTP_TOKEN"

[logging]
format = "json"
level = "debug"
"""

POSTGRESQL = """
[source]
name = "shop"
kind = "postgresql"
dsn = "host=db dbname=shop user=dblog"
password_env = "SHOP_DB_PASSWORD"
tables = ["public.orders"]
slot = "shop_slot"
publication = "shop_pub"
watermarks = "table"

[source.replica]
dsn = "host=replica dbname=shop user=dblog"
password_env = "SHOP_DB_PASSWORD"
max_wait_ms = 500

[target]
kind = "postgresql"
dsn = "host=warehouse dbname=replica user=merger"
password_env = "TARGET_DB_PASSWORD"
state_schema = "dblog"
tables = { "public.orders" = "shop.orders" }
""" + COMMON

MYSQL = """
[source]
name = "shop"
kind = "mariadb"
dsn = "mysql://dblog@db:3306"
password_env = "SHOP_DB_PASSWORD"
tables = ["shop.orders"]
server_id = 4242
watermarks = "table"

[source.replica]
dsn = "mysql://dblog@replica:3306"
password_env = "SHOP_DB_PASSWORD"
max_wait_ms = 500

[target]
kind = "mysql"
dsn = "mysql://merger@warehouse:3306"
password_env = "TARGET_DB_PASSWORD"
state_schema = "dblog"
tables = { "shop.orders" = "replica.orders" }
""" + COMMON

BASES = {"postgresql": tomllib.loads(POSTGRESQL), "mysql": tomllib.loads(MYSQL)}
ENV = {"SHOP_DB_PASSWORD": "pw1", "TARGET_DB_PASSWORD": "pw2", "DBLOG_HTTP_TOKEN": "tok",
       "OTHER": "host=x", "EMPTY": ""}

KIND_OPTIONS = frozenset().union(*(kinds.rules(k).option_names for k in kinds.REGISTRY))
# Every option of every section, as a path into the document.
OPTIONS: list[tuple[str, ...]] = sorted(
    [(section, option) for section, options in KNOWN.items() for option in options]
    + [("source", option) for option in KIND_OPTIONS]
    + [("source", "replica", option) for option in REPLICA_OPTIONS]
    + [(section,) for section in KNOWN]
)

# Strings that get past the first checks of some option, so that later ones run too.
PLAUSIBLE = ["", " ", "SHOP_DB_PASSWORD", "OTHER", "EMPTY", "postgresql", "mysql", "mariadb",
             "parquet", "table", "message", "position", "json", "text", "local[*]",
             "public.orders", "shop.orders", "nodot", ".x", "x.", "0.0.0.0:80", "[::1]:1",
             "[zz]:1", "127.0.0.1:99999", "host=db password=se cret", "host=db dbname=x",
             "redis://h:6379/0", "redis://:pw@h:port/0", "http://h", "mysql://u:pw@h:3306",
             "mysql://u@h:99999", "mysql://u:pw@[x", "/", "a\x00b", "é"]

scalars = st.one_of(
    st.sampled_from(PLAUSIBLE),
    st.text(max_size=12),
    st.integers(min_value=-2**63, max_value=2**63 - 1),
    st.floats(),
    st.booleans(),
    st.datetimes(),
    st.datetimes(timezones=st.just(UTC)),
    st.dates(),
    st.times(),
)
toml_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "dsn", "public.orders", "kind"]) | st.text(max_size=6),
                      inner, max_size=3),
    max_leaves=6,
)


def replaced(kind: str, path: tuple[str, ...], value: object) -> dict[str, Any]:
    data = copy.deepcopy(BASES[kind])
    where = data
    for part in path[:-1]:
        where = where[part]
    where[path[-1]] = value
    return data


def test_the_bases_load() -> None:
    for data in BASES.values():
        assert isinstance(parse(data, ENV), Config)


@settings(max_examples=3000)
@given(kind=st.sampled_from(sorted(BASES)), path=st.sampled_from(OPTIONS), value=toml_values)
def test_any_value_of_any_option_loads_or_is_named(kind: str, path: tuple[str, ...],
                                                   value: object) -> None:
    try:
        parse(replaced(kind, path, value), ENV)
    except ConfigError as exc:
        assert path[-1] in str(exc), (path, value, str(exc))


@given(kind=st.sampled_from(sorted(BASES)), path=st.sampled_from(OPTIONS))
def test_a_removed_option_loads_or_is_named(kind: str, path: tuple[str, ...]) -> None:
    data = replaced(kind, path, None)
    where = data
    for part in path[:-1]:
        where = where[part]
    del where[path[-1]]
    try:
        parse(data, ENV)
    except ConfigError as exc:
        assert path[-1] in str(exc), (path, str(exc))
