"""The SQL of the PostgreSQL source, asserted as exact text (as Debezium tests its chunk SQL)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.pg.queries import (
    TableShape,
    check_key_values_sql,
    chunk_sql,
    key_after_sql,
    key_params,
    keys_sql,
    publication_tables_sql,
    qualified,
    quote_ident,
    upper_bound_sql,
)

ONE = TableShape(
    schema="public",
    name="orders",
    key_columns=("id",),
    key_types=("integer",),
)
COMPOSITE = TableShape(
    schema="app",
    name="Line Items",
    key_columns=("region", "id"),
    key_types=("text", "integer"),
)
EVIL = 'x"; DROP TABLE t; --'
EVIL_QUOTED = '"x""; DROP TABLE t; --"'
CRAFTED = TableShape(
    schema=EVIL,
    name=EVIL,
    key_columns=(EVIL,),
    key_types=("bigint",),
)

SqlOf = Callable[[TableShape], str]


def _upper(shape: TableShape) -> str:
    return upper_bound_sql(shape)


def _first(shape: TableShape) -> str:
    return chunk_sql(shape, first=True)


def _next(shape: TableShape) -> str:
    return chunk_sql(shape, first=False)


def _keys(shape: TableShape) -> str:
    return keys_sql(shape)


def _first_end(shape: TableShape) -> str:
    return key_after_sql(shape, first=True)


def _next_end(shape: TableShape) -> str:
    return key_after_sql(shape, first=False)


@pytest.mark.parametrize(
    ("build", "shape", "expected"),
    [
        pytest.param(
            _upper, ONE,
            'SELECT "id" FROM "public"."orders" ORDER BY "id" DESC LIMIT 1',
            id="upper-one",
        ),
        pytest.param(
            _upper, COMPOSITE,
            'SELECT "region", "id" FROM "app"."Line Items" '
            'ORDER BY "region" DESC, "id" DESC LIMIT 1',
            id="upper-composite",
        ),
        pytest.param(
            _first, ONE,
            'SELECT * FROM "public"."orders" '
            'WHERE ("id") <= (CAST(%s AS integer)) ORDER BY "id" LIMIT %s',
            id="chunk-first-one",
        ),
        pytest.param(
            _next, ONE,
            'SELECT * FROM "public"."orders" '
            'WHERE ("id") > (CAST(%s AS integer)) AND ("id") <= (CAST(%s AS integer)) '
            'ORDER BY "id" LIMIT %s',
            id="chunk-next-one",
        ),
        pytest.param(
            _first, COMPOSITE,
            'SELECT * FROM "app"."Line Items" '
            'WHERE ("region", "id") <= (CAST(%s AS text), CAST(%s AS integer)) '
            'ORDER BY "region", "id" LIMIT %s',
            id="chunk-first-composite",
        ),
        pytest.param(
            _next, COMPOSITE,
            'SELECT * FROM "app"."Line Items" '
            'WHERE ("region", "id") > (CAST(%s AS text), CAST(%s AS integer)) '
            'AND ("region", "id") <= (CAST(%s AS text), CAST(%s AS integer)) '
            'ORDER BY "region", "id" LIMIT %s',
            id="chunk-next-composite",
        ),
        pytest.param(
            _first_end, ONE,
            'SELECT "id" FROM "public"."orders" '
            'WHERE ("id") <= (CAST(%s AS integer)) ORDER BY "id" LIMIT 1 OFFSET %s',
            id="range-end-first-one",
        ),
        pytest.param(
            _next_end, COMPOSITE,
            'SELECT "region", "id" FROM "app"."Line Items" '
            'WHERE ("region", "id") > (CAST(%s AS text), CAST(%s AS integer)) '
            'AND ("region", "id") <= (CAST(%s AS text), CAST(%s AS integer)) '
            'ORDER BY "region", "id" LIMIT 1 OFFSET %s',
            id="range-end-next-composite",
        ),
        pytest.param(
            _next_end, CRAFTED,
            f"SELECT {EVIL_QUOTED} FROM {EVIL_QUOTED}.{EVIL_QUOTED} "
            f"WHERE ({EVIL_QUOTED}) > (CAST(%s AS bigint)) "
            f"AND ({EVIL_QUOTED}) <= (CAST(%s AS bigint)) "
            f"ORDER BY {EVIL_QUOTED} LIMIT 1 OFFSET %s",
            id="range-end-next-crafted",
        ),
        pytest.param(
            _keys, ONE,
            "SELECT k.n, t.* "
            "FROM unnest(CAST(%s AS integer[])) WITH ORDINALITY AS k(k0, n) "
            'LEFT JOIN "public"."orders" AS t ON t."id" = k.k0 ORDER BY k.n',
            id="keys-one",
        ),
        pytest.param(
            _keys, COMPOSITE,
            "SELECT k.n, t.* "
            "FROM unnest(CAST(%s AS text[]), CAST(%s AS integer[])) "
            "WITH ORDINALITY AS k(k0, k1, n) "
            'LEFT JOIN "app"."Line Items" AS t ON t."region" = k.k0 AND t."id" = k.k1 '
            "ORDER BY k.n",
            id="keys-composite",
        ),
        pytest.param(
            _upper, CRAFTED,
            f"SELECT {EVIL_QUOTED} FROM {EVIL_QUOTED}.{EVIL_QUOTED} "
            f"ORDER BY {EVIL_QUOTED} DESC LIMIT 1",
            id="upper-crafted",
        ),
        pytest.param(
            _next, CRAFTED,
            f"SELECT * FROM {EVIL_QUOTED}.{EVIL_QUOTED} "
            f"WHERE ({EVIL_QUOTED}) > (CAST(%s AS bigint)) "
            f"AND ({EVIL_QUOTED}) <= (CAST(%s AS bigint)) "
            f"ORDER BY {EVIL_QUOTED} LIMIT %s",
            id="chunk-next-crafted",
        ),
        pytest.param(
            _keys, CRAFTED,
            "SELECT k.n, t.* "
            "FROM unnest(CAST(%s AS bigint[])) WITH ORDINALITY AS k(k0, n) "
            f"LEFT JOIN {EVIL_QUOTED}.{EVIL_QUOTED} AS t ON t.{EVIL_QUOTED} = k.k0 "
            "ORDER BY k.n",
            id="keys-crafted",
        ),
    ],
)
def test_exact_sql(build: SqlOf, shape: TableShape, expected: str) -> None:
    assert build(shape) == expected


@pytest.mark.parametrize(
    ("shape", "first", "placeholders"),
    [
        (ONE, True, 2),  # upper bound, limit
        (ONE, False, 3),  # last key, upper bound, limit
        (COMPOSITE, True, 3),
        (COMPOSITE, False, 5),
    ],
)
def test_chunk_sql_placeholder_count(shape: TableShape, first: bool, placeholders: int) -> None:
    assert chunk_sql(shape, first=first).count("%s") == placeholders


@pytest.mark.parametrize(
    ("key_type", "expected"),
    [
        ("integer", "SELECT CAST(v AS integer) FROM unnest(CAST(%s AS text[])) AS u(v)"),
        ("text", "SELECT CAST(v AS text) FROM unnest(CAST(%s AS text[])) AS u(v)"),
        (
            "character varying(20)",
            "SELECT CAST(v AS character varying(20)) FROM unnest(CAST(%s AS text[])) AS u(v)",
        ),
    ],
)
def test_check_key_values_sql(key_type: str, expected: str) -> None:
    assert check_key_values_sql(key_type) == expected


def test_publication_tables_sql() -> None:
    assert publication_tables_sql() == (
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders", '"orders"'),
        ("", '""'),
        ("Mixed Case", '"Mixed Case"'),
        ('a"b', '"a""b"'),
        ('"', '""""'),
        ('""', '""""""'),
        (EVIL, EVIL_QUOTED),
        ("naïve.ünïcode", '"naïve.ünïcode"'),
        ("a\nb", '"a\nb"'),
    ],
)
def test_quote_ident(name: str, expected: str) -> None:
    assert quote_ident(name) == expected


@pytest.mark.parametrize("name", ["\x00", "a\x00b", 'x"\x00'])
def test_quote_ident_refuses_nul(name: str) -> None:
    with pytest.raises(ValueError, match="identifiers cannot contain NUL"):
        quote_ident(name)


def test_table_shape_with_nul_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        upper_bound_sql(TableShape("public", "t\x00", ("id",), ("integer",)))


@pytest.mark.parametrize(
    ("schema", "name", "expected"),
    [
        ("public", "orders", '"public"."orders"'),
        ("a.b", "c", '"a.b"."c"'),
        (EVIL, "t", f'{EVIL_QUOTED}."t"'),
    ],
)
def test_qualified(schema: str, name: str, expected: str) -> None:
    assert qualified(schema, name) == expected
    assert TableShape(schema, name, ("id",), ("integer",)).qualified == expected


# A PostgreSQL quoted identifier: '"', then any characters with '"' doubled, then '"'.
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
_identifier_text = st.text(st.characters(blacklist_characters="\x00"), max_size=30)


@given(_identifier_text)
def test_quote_ident_is_one_token_that_reads_back(name: str) -> None:
    quoted = quote_ident(name)
    match = _QUOTED.fullmatch(quoted)
    assert match is not None
    assert match[1].replace('""', '"') == name


@given(_identifier_text, _identifier_text)
def test_crafted_names_stay_inside_their_identifiers(schema: str, column: str) -> None:
    shape = TableShape(schema, "t", (column,), ("integer",))
    sql = upper_bound_sql(shape)
    # Removing every quoted identifier leaves only the statement's own text.
    assert _QUOTED.sub("I", sql) == "SELECT I FROM I.I ORDER BY I DESC LIMIT 1"


@pytest.mark.parametrize(
    ("keys", "arity", "expected"),
    [
        ([("1",), ("2",), ("3",)], 1, [["1", "2", "3"]]),
        ([("eu", "1"), ("us", "2")], 2, [["eu", "us"], ["1", "2"]]),
        ([("a", "b", "c")], 3, [["a"], ["b"], ["c"]]),
        ([], 2, [[], []]),
        ((["x", "1"], ["y", "2"]), 2, [["x", "y"], ["1", "2"]]),
    ],
)
def test_key_params_transposes(
    keys: Sequence[Sequence[str]], arity: int, expected: list[list[str]]
) -> None:
    assert key_params(keys, arity) == expected


@given(st.integers(1, 4).flatmap(
    lambda n: st.lists(st.tuples(*[st.text(max_size=5)] * n), max_size=20).map(
        lambda keys: (n, keys)
    )
))
def test_key_params_round_trip(case: tuple[int, list[tuple[str, ...]]]) -> None:
    arity, keys = case
    columns = key_params(keys, arity)
    assert len(columns) == arity
    assert all(len(column) == len(keys) for column in columns)
    assert [tuple(row) for row in zip(*columns, strict=True)] == keys
