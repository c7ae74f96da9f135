"""Filtered dumps without a database: the filter's forms and rules, the request record that
holds it, and the SQL each source spells it into (exact text and parameters)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.dump.requests import DumpKind, DumpRequest, RequestState
from dblog_worker.dump.row_filter import MAX_CONDITIONS, Condition, Op, RowFilter, key_argument
from dblog_worker.dump.spec import DumpSpec
from dblog_worker.errors import CorruptRequest, RequestRejected
from dblog_worker.mysql import catalog as my
from dblog_worker.pg import queries as pg

REGIONS = RowFilter.of([{"column": "region", "op": "in", "values": ["EU", "US"]},
                        {"column": "created_at", "op": ">=", "value": "2026-01-01"}])


def test_the_forms_of_a_condition_mean_the_same() -> None:
    by_object = RowFilter.of([{"column": "region", "op": "in", "values": ["EU", "US"]},
                              {"column": "n", "op": "<=", "value": 5},
                              {"column": "gone", "op": "is null"}])
    by_words = RowFilter.of([["region", "IN", "EU", "US"], ["n", "<=", "5"],
                             ["gone", "is", "NULL"]])
    assert by_object == by_words
    assert by_object is not None
    assert by_object.conditions[1] == Condition("n", Op.LE, ("5",))  # numbers as JSON text
    assert RowFilter.of([["a", "==", "1"], ["b", "<>", "2"], ["c", "not", "in", "x"]]) == \
        RowFilter.of([{"column": "a", "op": "=", "value": "1"},
                      {"column": "b", "op": "!=", "value": "2"},
                      {"column": "c", "op": "not in", "values": ["x"]}])


def test_nothing_given_is_no_filter_and_keys_are_lists_of_texts() -> None:
    assert RowFilter.of() is None
    assert RowFilter.of([], None, None) is None
    ranged = RowFilter.of(None, 10, "abc")
    assert ranged == RowFilter((), ("10",), ("abc",))
    assert RowFilter.of(None, [1, "a"]) == RowFilter((), ("1", "a"), None)
    assert [key_argument(t) for t in ("10", '[1, "a"]', "abc", "007", "2026-01-01")] == \
        [10, [1, "a"], "abc", "007", "2026-01-01"]


@pytest.mark.parametrize(("where", "from_key", "to_key", "message"), [
    ("region = 'EU'", None, None, "where must be a list of conditions"),
    ([{"column": "a", "op": "like", "value": "x%"}], None, None, "op must be one of ="),
    ([{"column": "a", "op": "==", "value": 1}], None, None, 'got "=="'),  # JSON: exact ops
    ([{"column": "a", "op": "IN", "values": [1]}], None, None, 'got "IN"'),
    ([{"column": "a", "op": "=", "value": None}], None, None, "use the op is null"),
    ([{"column": "a", "op": "=", "value": True}], None, None, "is a JSON boolean"),
    ([{"column": "a", "op": "=", "value": [1]}], None, None, "is not a number or a string"),
    ([{"column": "a", "op": "="}], None, None, "a = takes one value, got 0"),
    ([{"column": "a", "op": "in", "values": []}], None, None, "takes 1 to 10000 values"),
    ([{"column": "a", "op": "is null", "value": 1}], None, None, "takes no value"),
    ([{"column": "a", "op": "=", "value": 1, "values": [1]}], None, None, "not both"),
    ([{"column": "a", "op": "=", "value": 1, "sql": "1=1"}], None, None, "unknown field(s) sql"),
    ([{"column": "", "op": "=", "value": 1}], None, None, "must be a column name"),
    ([{"column": 7, "op": "=", "value": 1}], None, None, "must be a column name, got 7"),
    ([["a"]], None, None, "needs a column and an operator"),
    ([["a", "like", "x"]], None, None, '"like" is not an operator'),
    ([{"column": "a", "op": "=", "value": "x" * 10_001}], None, None, "longer than"),
    ([{"column": "a", "op": "=", "value": "a\x00b"}], None, None, "holds a NUL"),
    (None, [], None, "from_key is an empty list"),
    (None, [1], [1, 2], "from_key has 1 value(s) but to_key 2"),
    (None, None, {"id": 1}, "to_key: {\"id\": 1} is not a number or a string"),
    ([["a", "=", "1"]] * (MAX_CONDITIONS + 1), None, None, "at most 32 conditions"),
])
def test_bad_filters_are_refused_saying_why(where: object, from_key: object, to_key: object,
                                            message: str) -> None:
    with pytest.raises(RequestRejected) as refused:
        RowFilter.of(where, from_key, to_key)
    assert message in str(refused.value)


def test_what_a_filter_is_of_follows_the_kind() -> None:
    spec = DumpSpec.of("tables", ["s.t", "s.u"], where=[["region", "=", "EU"]])
    assert spec.row_filter == RowFilter((Condition("region", Op.EQ, ("EU",)),))
    assert DumpSpec.of("all", where=[["region", "=", "EU"]]).row_filter is not None
    assert DumpSpec.of("tables", ["s.t"], from_key=1, to_key=9).row_filter == \
        RowFilter((), ("1",), ("9",))
    cases: list[tuple[str, list[str] | None, list[object] | None, dict[str, object], str]] = [
        ("keys", ["s.t"], [1], {"where": [["a", "=", "1"]]}, "reads the keys it names"),
        ("keys", ["s.t"], [1], {"from_key": 1}, "reads the keys it names"),
        ("tables", ["s.t", "s.u"], None, {"to_key": 1}, "got 2 tables"),
        ("all", None, None, {"from_key": 1}, "got kind all"),
    ]
    for kind, tables, keys, extra, message in cases:
        with pytest.raises(RequestRejected) as refused:
            DumpSpec.of(kind, tables, keys, where=extra.get("where"),
                        from_key=extra.get("from_key"), to_key=extra.get("to_key"))
        assert message in str(refused.value)


def request(row_filter: RowFilter | None, kind: DumpKind = DumpKind.TABLES) -> DumpRequest:
    return DumpRequest("dump-3", kind, ("s.t",), 10, 0, RequestState.QUEUED, 1.0, 1.0,
                       key_count=1 if kind is DumpKind.KEYS else 0, row_filter=row_filter)


@given(st.lists(st.tuples(
    st.text(min_size=1, max_size=8).filter(lambda t: "\x00" not in t),
    st.sampled_from(list(Op)),
    st.lists(st.text(max_size=6).filter(lambda t: "\x00" not in t), min_size=1, max_size=3),
), max_size=4), st.one_of(st.none(), st.lists(st.integers(), min_size=2, max_size=2)))
def test_a_request_keeps_its_filter_in_redis(conditions: list[tuple[str, Op, list[str]]],
                                             key: list[int] | None) -> None:
    made = [Condition(c, op, tuple(v[:op.arity[1]])) for c, op, v in conditions]
    row_filter = RowFilter(tuple(made), None if key is None else tuple(map(str, key)),
                           None if key is None else tuple(map(str, key)))
    if not made and key is None:
        return
    fields = request(row_filter).to_fields()
    assert DumpRequest.from_fields(fields).row_filter == row_filter
    shown = json.loads(fields["filter"])  # as the API shows it, and takes it
    assert RowFilter.of(shown["where"], shown["from_key"], shown["to_key"]) == row_filter


def test_a_request_without_a_filter_reads_as_before() -> None:
    fields = request(None).to_fields()
    assert "filter" not in fields
    assert DumpRequest.from_fields(fields).row_filter is None


@pytest.mark.parametrize(("text", "reason"), [
    ("{", "is not JSON"),
    ("[]", "is not an object of where, from_key and to_key"),
    ('{"where": [], "sql": "x"}', "is not an object of where, from_key and to_key"),
    ('{"where": []}', "is empty"),
    ('{"where": [{"column": "a", "op": "~", "value": "x"}]}', "op must be one of"),
])
def test_a_malformed_filter_in_redis_names_the_field(text: str, reason: str) -> None:
    fields = {**request(None).to_fields(), "filter": text}
    with pytest.raises(CorruptRequest) as bad:
        DumpRequest.from_fields(fields, key="dblog:v1:src:request:dump-3")
    assert bad.value.field == "filter" and reason in bad.value.reason


def test_a_primary_key_dump_with_a_filter_in_redis_is_malformed() -> None:
    fields = {**request(None, DumpKind.KEYS).to_fields(),
              "filter": '{"where": [{"column": "a", "op": "is null"}]}'}
    with pytest.raises(CorruptRequest, match="a primary-key dump reads the keys it names"):
        DumpRequest.from_fields(fields)


def test_described_for_people() -> None:
    assert REGIONS is not None
    assert REGIONS.describe() == 'region in ("EU", "US") AND created_at >= "2026-01-01"'
    many = RowFilter.of([{"column": "n", "op": "not in", "values": list(range(7))}], 1, 9)
    assert many is not None
    assert many.describe() == ('n not in ("0", "1", "2", "3", "4", ... (7 values)) AND '
                               'key >= ["1"] AND key <= ["9"]')


# -- PostgreSQL --------------------------------------------------------------------------

PG_SHAPE = pg.TableShape("public", "orders", ("id",), ("integer",))
PG_TYPES = {"region": "text", "created_at": "timestamp with time zone", "id": "integer",
            "disc%": "numeric", "gone": "date"}


def test_pg_conditions_cast_each_value_to_its_column_type() -> None:
    row_filter = RowFilter.of([
        {"column": "region", "op": "in", "values": ["EU", "US"]},
        {"column": "created_at", "op": ">=", "value": "2026-01-01"},
        {"column": "disc%", "op": "!=", "value": 5},
        {"column": "region", "op": "not in", "values": ["x"]},
        {"column": "gone", "op": "is not null"},
    ], 100, 200)
    assert row_filter is not None
    where, params = pg.filter_sql(PG_SHAPE, row_filter, PG_TYPES)
    assert where == [
        '"region" = ANY(CAST(%s AS text[]))',
        '"created_at" >= CAST(%s AS timestamp with time zone)',
        '"disc%%" <> CAST(%s AS numeric)',
        '"region" <> ALL(CAST(%s AS text[]))',
        '"gone" IS NOT NULL',
        '("id") >= (CAST(%s AS integer))',
        '("id") <= (CAST(%s AS integer))',
    ]
    assert params == [["EU", "US"], "2026-01-01", "5", ["x"], "100", "200"]
    assert pg.chunk_sql(PG_SHAPE, first=False, where=where[:1]) == (
        'SELECT * FROM "public"."orders" WHERE ("id") > (CAST(%s AS integer)) AND ("id") <= '
        '(CAST(%s AS integer)) AND "region" = ANY(CAST(%s AS text[])) ORDER BY "id" LIMIT %s')
    assert pg.upper_bound_sql(PG_SHAPE, where[4:5]) == (
        'SELECT "id" FROM "public"."orders" WHERE "gone" IS NOT NULL ORDER BY "id" DESC LIMIT 1')
    assert pg.key_after_sql(PG_SHAPE, first=True, where=where[:1]).endswith(
        'AND "region" = ANY(CAST(%s AS text[])) ORDER BY "id" LIMIT 1 OFFSET %s')
    assert pg.upper_bound_sql(PG_SHAPE) == pg.upper_bound_sql(PG_SHAPE, ())


# -- MySQL / MariaDB ---------------------------------------------------------------------

MY_SHAPE = my.TableShape("shop.orders", ("region", "id", "n%"), ("region", "id"))


def test_my_conditions_bind_each_value_as_its_column_parses_it() -> None:
    row_filter = RowFilter.of([
        {"column": "n%", "op": "in", "values": [1, 2]},
        {"column": "region", "op": "<", "value": "M"},
        {"column": "n%", "op": "is null"},
    ], ["EU", 1], ["US", 9])
    assert row_filter is not None
    seen: list[tuple[str, str]] = []

    def param(column: str, text: str) -> object:
        seen.append((column, text))
        return f"<{text}>"

    where, params = my.filter_sql(MY_SHAPE, row_filter, param,
                                  lambda texts: [f"k{t}" for t in texts])
    assert where == [
        "`n%%` IN (%s, %s)",
        "`region` < %s",
        "`n%%` IS NULL",
        "((`region` > %s) OR (`region` = %s AND `id` > %s) OR (`region` = %s AND `id` = %s))",
        "((`region` < %s) OR (`region` = %s AND `id` < %s) OR (`region` = %s AND `id` = %s))",
    ]
    assert params == ["<1>", "<2>", "<M>", "kEU", "kEU", "k1", "kEU", "k1",
                      "kUS", "kUS", "k9", "kUS", "k9"]
    assert seen == [("n%", "1"), ("n%", "2"), ("region", "M")]
    assert my.chunk_sql(MY_SHAPE, first=True, where=where[:1]) == (
        "SELECT `region`, `id`, `n%%` FROM `shop`.`orders` WHERE ((`region` < %s) OR "
        "(`region` = %s AND `id` < %s) OR (`region` = %s AND `id` = %s)) AND `n%%` IN (%s, %s) "
        "ORDER BY `region`, `id` LIMIT %s")
    assert my.upper_bound_sql(MY_SHAPE, where[1:2]) == (
        "SELECT `region`, `id` FROM `shop`.`orders` WHERE `region` < %s "
        "ORDER BY `region` DESC, `id` DESC LIMIT 1")


@given(st.tuples(st.integers(0, 3), st.integers(0, 3)),
       st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_my_at_least_means_the_row_comparison(row: tuple[int, int],
                                              bound: tuple[int, int]) -> None:
    """The expanded ``(a, b) >= (x, y)``, evaluated in Python, is the tuple comparison."""
    text = my._at_least(("a", "b"))
    values = iter(my.at_most_params(list(bound)))
    expression = text.replace("`a`", str(row[0])).replace("`b`", str(row[1]))
    expression = expression.replace(" = ", " == ").replace("AND", "and").replace("OR", "or")
    while "%s" in expression:
        expression = expression.replace("%s", str(next(values)), 1)
    assert eval(expression) == (row >= bound)  # noqa: S307 - digits and operators only
