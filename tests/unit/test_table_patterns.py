"""The pattern language of source.tables, and which tables a selector captures and why."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.config import parse
from dblog_worker.errors import ConfigError, RequestRejected
from dblog_worker.table_patterns import (
    Candidate,
    NamePattern,
    PatternError,
    TablePattern,
    TableSelector,
    escape,
)

# The hostile names' alphabet (tests/integration/test_hostile_names.py), specials first.
NAMES = st.text(alphabet="*?[]!-\\.abcXYZ019 _%\"`'\\;:$()#@&+=,/<>|~^äöüßé€漢字☃😀",
                min_size=1, max_size=20)


@given(NAMES)
def test_an_escaped_name_names_itself_only(name: str) -> None:
    part = NamePattern.parse(escape(name))
    assert part.literal == name and part.regex is None
    assert part.matches(name)
    assert not part.matches(name + "x") and not part.matches("x" + name)


@given(NAMES, NAMES)
def test_an_escaped_table_is_a_name(schema: str, table: str) -> None:
    schema = schema.replace(".", "_")  # a schema name has no dot
    entry = TablePattern.parse(f"{escape(schema)}.{escape(table)}")
    assert entry.name == f"{schema}.{table}"
    assert TableSelector([entry.text]).verdict(f"{schema}.{table}") == (
        True, "named in source.tables")


@pytest.mark.parametrize(("pattern", "matching", "other"), [
    ("*", ["", "a", "a.b", "*"], []),
    ("order_*", ["order_", "order_items", "order_a.b"], ["orders", "Order_x", "xorder_"]),
    ("?", ["a", "*", "☃"], ["", "ab"]),
    ("t?_[0-9]", ["t1_5", "tx_0"], ["t1_a", "t_5", "t12_5"]),
    ("[!a-c]x", ["dx", "Ax", "-x"], ["ax", "cx", "x"]),
    ("[]a]", ["]", "a"], ["b", "[]a]"]),
    ("[a-]", ["a", "-"], ["b"]),
    ("a\\*b", ["a*b"], ["axb", "ab"]),
    ("a\\[b]", ["a[b]"], ["ab"]),
    ("\\\\", ["\\"], ["\\\\"]),
    ("x.y*", ["x.y", "x.yz"], ["x", "xy"]),  # a dot is nothing special in a part
])
def test_glob(pattern: str, matching: list[str], other: list[str]) -> None:
    part = NamePattern.parse(pattern)
    for name in matching:
        assert part.matches(name), (pattern, name)
    for name in other:
        assert not part.matches(name), (pattern, name)


@pytest.mark.parametrize(("entry", "error"), [
    ("orders", "must be qualified: schema.table"),
    (".orders", "must be qualified"),
    ("shop.", "must be qualified"),
    ("a\\.b.c", "a schema or database name cannot contain a dot"),
    ("shop.a\\b", "a backslash escapes only *, ?, [, ] and \\"),
    ("shop.ab\\", "a backslash escapes only"),
    ("shop.[ab", "a [ is never closed (write \\[ for a [ in a name)"),
    ("shop.[z-a]", "the range z-a is empty"),
])
def test_malformed_entries(entry: str, error: str) -> None:
    with pytest.raises(PatternError, match=None) as info:
        TablePattern.parse(entry)
    assert error in str(info.value)


def test_verdicts_say_why() -> None:
    selector = TableSelector(["shop.*", "public.order_*", "x.a\\*b"],
                             ["shop.tmp_*"], name_problem=lambda t: "too long" if "long" in t
                             else None)
    assert selector.names == ("x.a*b",)
    assert selector.has_patterns and selector.schemas == frozenset({"shop", "public", "x"})
    assert selector.verdict("shop.orders") == (True, "matches 'shop.*'")
    assert selector.verdict("shop.tmp_1") == (
        False, "matches 'shop.*', excluded by 'shop.tmp_*' (source.exclude_tables)")
    assert selector.verdict("public.orders") == (False, "matches no entry of source.tables")
    assert selector.verdict("shop.long") == (False, "matches 'shop.*', but too long")
    assert selector.verdict("x.a*b") == (True, "named in source.tables")
    assert not selector.captures("x.axb")
    assert TableSelector(["*.*"]).verdict("dblog.watermark") == (
        False, "matches '*.*', but schema dblog is the worker's own")
    assert TableSelector(["*.x"]).schemas is None  # every schema must be read


def test_select_among_the_catalog() -> None:
    selector = TableSelector(["shop.*", "shop.gone"], ["shop.skip"])
    selection = selector.select([
        Candidate("shop.orders", ("id",)),
        Candidate("shop.nokey"),
        Candidate("shop.p1", ("id",), "it is a partition of shop.p (...)"),
        Candidate("shop.skip", ("id",)),
        Candidate("other.t", ("id",)),
    ])
    assert selection.captured == {"shop.gone": "named in source.tables; it does not exist now",
                                  "shop.orders": "matches 'shop.*'"}
    assert selection.existing == ("shop.orders",) and selection.missing == ("shop.gone",)
    assert selection.excluded == {
        "shop.nokey": "matches 'shop.*', but it has no primary key nor unique index on NOT "
                      "NULL columns (name its key in source.keys)",
        "shop.p1": "matches 'shop.*', but it is a partition of shop.p (...)",
        "shop.skip": "matches 'shop.*', excluded by 'shop.skip' (source.exclude_tables)",
    }
    named = TableSelector(["shop.nokey"]).select([Candidate("shop.nokey")])
    assert named.captured == {"shop.nokey": "named in source.tables"}  # preflight refuses


def test_a_name_listed_and_excluded_is_refused() -> None:
    with pytest.raises(PatternError,
                       match=re.escape("it is named in source.tables and excluded by")):
        TableSelector(["shop.orders"], ["shop.*"])


CONFIG: dict[str, Any] = {
    "source": {"name": "shop", "dsn": "host=db dbname=shop", "tables": ["shop.*"],
               "exclude_tables": ["shop.tmp_*"]},
    "redis": {"url": "redis://127.0.0.1:6379/0"}, "landing": {"path": "/data"},
}


def test_the_configuration_checks_entries_and_requests() -> None:
    config = parse(CONFIG, {})
    assert config.source.tables == ("shop.*",)
    config.source.check_captured(["shop.orders"])
    with pytest.raises(RequestRejected, match=re.escape("excluded by 'shop.tmp_")):
        config.source.check_captured(["shop.tmp_1"])
    with pytest.raises(RequestRejected, match=re.escape("matches no entry of source.tables")):
        config.source.check_captured(["public.orders"])
    for tables, exclude, error in (
        (["shop.[a"], [], "source.tables: 'shop.[a': a [ is never closed"),
        (["shop.*"], ["shop\\x.*"], "source.exclude_tables: 'shop\\\\x.*': "),
        (["shop.a"], ["shop.*"], "source.tables: 'shop.a': it is named in source.tables and "
                                  "excluded by 'shop.*'"),
    ):
        source = {**CONFIG["source"], "tables": tables, "exclude_tables": exclude}
        with pytest.raises(ConfigError) as info:
            parse({**CONFIG, "source": source}, {})
        assert str(info.value).startswith(error), info.value
