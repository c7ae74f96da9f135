"""Foreign-key cascades the log does not carry: what a parent row change derives, what it
reaches, the events' images, and applying them to canonical JSON rows (same bytes)."""

from __future__ import annotations

import pytest

from dblog_worker.foreign_keys import (
    Action,
    CascadePlan,
    ForeignKey,
    Rule,
    action_images,
    apply_actions,
    parse_actions,
    parse_prune,
    prune_image,
    row_fragments,
)
from dblog_worker.mysql.cascades import exact_pair, plan, summary

C, N, R = Rule.CASCADE, Rule.SET_NULL, Rule.NO_ACTION


def fk(name: str, child: str, columns: tuple[str, ...], parent: str,
       referenced: tuple[str, ...], on_delete: Rule = C, on_update: Rule = R,
       exact: bool = True) -> ForeignKey:
    return ForeignKey(name, child, columns, parent, referenced, on_delete, on_update, exact)


KEYS = (
    fk("c_p", "d.c", ("pid",), "d.p", ("id",), C, C),
    fk("n_p", "d.n", ("pid",), "d.p", ("id",), N, N),
    fk("n_p2", "d.n", ("pid2",), "d.p", ("id",), C, R),
    fk("u_p", "d.u", ("pk",), "d.p", ("k",), R, C),
    fk("g_c", "d.g", ("cid",), "d.c", ("id",), C, R),
    fk("x_p", "d.x", ("pid",), "d.p", ("id",), C, C),  # x not captured
    fk("xx_x", "d.xx", ("xid",), "d.x", ("id",), C, R),  # under x: two away
    fk("ci_p", "d.ci", ("pk",), "d.p", ("k",), C, R, exact=False),
    fk("s_s", "d.s", ("up",), "d.s", ("id",), C, C),
)
CAPTURED = frozenset({"d.p", "d.c", "d.n", "d.u", "d.g", "d.xx", "d.ci", "d.s"})
PLAN = CascadePlan(KEYS, CAPTURED)
P_ROW = '{"id":7,"k":"k7","v":1.5}'


def test_a_parent_delete_derives_each_captured_childs_actions_deletes_first() -> None:
    actions, pruned = PLAN.derive("d.p", P_ROW, None)
    assert actions == {
        "d.c": [Action((("pid", "7"),), None)],
        "d.n": [Action((("pid2", "7"),), None), Action((("pid", "7"),), (("pid", "null"),))],
        "d.ci": [Action((("pk", '"k7"'),), None)],
    }
    # g below c, xx below x (not captured): two foreign keys away; ci compares by collation
    assert pruned == {"d.g", "d.xx", "d.ci"}


@pytest.mark.parametrize(("after", "expected", "pruned"), [
    # the referenced key changes: c cascades, n sets null (ON UPDATE SET NULL)
    ('{"id":8,"k":"k7","v":1.5}', {"d.c": [Action((("pid", "7"),), (("pid", "8"),))],
                                   "d.n": [Action((("pid", "7"),), (("pid", "null"),))]},
     set()),
    # a unique column only: u cascades; ci's rule does not act on update
    ('{"id":7,"k":"k8","v":1.5}', {"d.u": [Action((("pk", '"k7"'),), (("pk", '"k8"'),))]},
     set()),
    ('{"id":7,"k":"k7","v":2}', {}, set()),  # no referenced column changed
], ids=["key", "unique-column", "other-column"])
def test_a_parent_update_acts_only_when_referenced_values_change(
        after: str, expected: dict[str, list[Action]], pruned: set[str]) -> None:
    assert PLAN.derive("d.p", P_ROW, after) == (expected, frozenset(pruned))


def test_nulls_and_inserts_and_tables_without_children_derive_nothing() -> None:
    assert PLAN.derive("d.p", '{"id":null,"k":null,"v":1}', None) == ({}, frozenset())
    assert PLAN.derive("d.p", None, P_ROW) == ({}, frozenset())  # an insert
    assert PLAN.derive("d.u", '{"id":1,"pk":"k1"}', None) == ({}, frozenset())


def test_a_table_that_references_itself_is_pruned_below_its_first_level() -> None:
    actions, pruned = PLAN.derive("d.s", '{"id":3,"up":1}', None)
    assert actions == {"d.s": [Action((("up", "3"),), None)]}
    assert pruned == {"d.s"}


def test_images_round_trip_and_malformed_ones_are_refused() -> None:
    actions = [Action((("a", '"x\\"y"'), ("b", "1")), None),
               Action((("c", "2"),), (("c", "null"),))]
    before, after = action_images(actions)
    assert (before, after) == ('[{"a":"x\\"y","b":1},{"c":2}]', '[null,{"c":null}]')
    assert parse_actions(before, after) == actions
    for bad in (("[]", "[]"), ('[{"a":1}]', "[null,null]"), ('{"a":1}', "[null]"),
                ("[{}]", "[null]"), ('[{"a":1} ]', "[null]")):
        with pytest.raises(ValueError):
            parse_actions(*bad)
    assert parse_prune(prune_image("ab" * 24)) == "ab" * 24
    with pytest.raises(ValueError):
        parse_prune('{"older_than":"00"}')


ROW = '{"id":1,"pid":7,"f":-0,"big":1e+20,"t":"ü\\n😀","d":"1.50","pid2":7}'


def test_actions_apply_in_order_and_keep_every_other_value_as_written() -> None:
    assert row_fragments(ROW)["f"] == "-0"
    delete = [Action((("pid", "7"),), None)]
    set_null = [Action((("pid2", "7"),), (("pid2", "null"),))]
    move = [Action((("pid", "7"),), (("pid", "8"),))]
    assert apply_actions(ROW, [delete]) is None
    assert apply_actions(ROW, [set_null]) == ROW.replace('"pid2":7', '"pid2":null')
    assert apply_actions(ROW, [move, [Action((("pid", "8"),), (("pid", "9"),))]]) == \
        ROW.replace('"pid":7', '"pid":9')
    untouched = [Action((("pid", "6"),), None)]
    assert apply_actions(ROW, [untouched]) is ROW  # the same object: nothing changed
    # the actions of one event all see the row as it was before it
    both = [Action((("pid", "7"),), (("pid", "null"),)),
            Action((("pid2", "7"),), (("pid2", "null"),))]
    assert apply_actions(ROW, [both]) == ROW.replace('"pid":7', '"pid":null').replace(
        '"pid2":7', '"pid2":null')
    # a null never matches
    assert apply_actions('{"id":1,"pid":null}', [[Action((("pid", "null"),), None)]]) == \
        '{"id":1,"pid":null}'


@pytest.mark.parametrize(("child", "parent", "exact"), [
    (("int", "int(11)", None), ("int", "int(11)", None), True),
    (("int", "int", None), ("int", "int unsigned", None), False),
    (("varchar", "varchar(10)", "utf8mb4_nopad_bin"), ("varchar", "varchar(20)",
                                                       "utf8mb4_nopad_bin"), True),
    (("varchar", "varchar(10)", "utf8mb4_bin"), ("varchar", "varchar(10)", "utf8mb4_bin"),
     False),  # PAD SPACE: 'a' = 'a '
    (("varchar", "varchar(10)", "utf8mb4_general_ci"),
     ("varchar", "varchar(10)", "utf8mb4_general_ci"), False),
    (("varbinary", "varbinary(16)", None), ("varbinary", "varbinary(16)", None), True),
    (("char", "char(3)", "binary"), ("varchar", "varchar(3)", "binary"), False),
    (("datetime", "datetime(3)", None), ("datetime", "datetime(6)", None), False),
    (("decimal", "decimal(10,2)", None), ("decimal", "decimal(10,2)", None), True),
], ids=["int", "signedness", "nopad-bin", "pad-space-bin", "ci", "varbinary",
        "char-varchar", "fsp", "decimal"])
def test_values_compare_byte_for_byte_only_in_exact_pairs(
        child: tuple[str, str, str | None], parent: tuple[str, str, str | None],
        exact: bool) -> None:
    assert exact_pair(child, parent) is exact


def test_the_plan_keeps_the_ancestors_of_captured_tables_and_preflight_says_why() -> None:
    kept = plan(KEYS, {"d.g"})
    assert {k.name for k in kept.keys} == {"g_c", "c_p"}  # g's parent c, and c's parent p
    assert kept.parents == {"d.c", "d.p"}
    lines = summary(plan(KEYS, CAPTURED))
    assert "d.c(pid) -> d.p(id) [c_p] ON DELETE CASCADE, ON UPDATE CASCADE: foreign-key " \
        "action events derived from the parent's row events (landing op f), applied by the " \
        "merge by predicate" in lines
    assert any(line.startswith("d.x(pid) -> d.p(id) [x_p]") and "not captured" in line
               for line in lines)
    assert any(line.startswith("d.ci(pk)") and "compare by collation" in line for line in lines)
    assert "a cascade from a change of d.p reaches d.ci, d.g, d.xx where no event can say " \
        "which rows: the worker queues a pruning dump of each (at most one waiting)" in lines


def test_an_update_cascading_into_the_childs_primary_key_prunes_it_a_delete_does_not() -> None:
    lines = ForeignKey("l_o", "d.lines", ("oid",), "d.orders", ("id",), C, C, in_key=True)
    keyed = CascadePlan((lines,), frozenset({"d.lines"}))
    assert keyed.derive("d.orders", '{"id":1}', '{"id":2}') == ({}, frozenset({"d.lines"}))
    assert keyed.derive("d.orders", '{"id":1}', None) == (
        {"d.lines": [Action((("oid", "1"),), None)]}, frozenset())
