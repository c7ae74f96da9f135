"""Table-driven tests of the reconciliation rule (paper, Algorithm 1, steps 5-7)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from dblog_worker.capture.window import Reconciler, WindowState
from dblog_worker.errors import ProtocolError
from dblog_worker.events import EVERY_TABLE, ChangeEvent, Op, Origin, Unseen, Watermark
from dblog_worker.position import Position
from tests.unit.helpers import dump_events

RUN = "run1"
TABLE = "public.t"
OTHER = "public.other"


@dataclass(frozen=True)
class Log:
    """A log event for the script: op, key (a short name), table."""

    op: str
    key: str | None
    table: str = TABLE


@dataclass(frozen=True)
class Mark:
    kind: str  # "lw" | "hw" | a literal token


@dataclass(frozen=True)
class Late:
    """Changes logged before LW that the chunk SELECT did not see (emitted earlier)."""

    keys: tuple[str, ...] = ()
    overflow: frozenset[str] = frozenset()
    table: str = TABLE
    truncate: bool = False


Step = Log | Mark | Late


def key(name: str) -> str:
    return f'["{name}"]'


def run_script(
    chunk: Sequence[str], script: Sequence[Step], *, run_id: str = RUN
) -> list[str]:
    """Feeds a window and a log script to the reconciler; returns the output as short strings.

    Log events render as ``op:key`` (``op:key@table`` for another table), dump rows as
    ``r:key``; positions are checked to increase strictly along the output.
    """
    reconciler = Reconciler(run_id)
    tokens = reconciler.next_tokens()
    keys = [key(name) for name in chunk]
    afters = [f'{{"k":"{name}"}}' for name in chunk]
    reconciler.open(TABLE, tokens, keys, dump_id="d1", schema_version=1)
    output: list[ChangeEvent] = []
    for index, step in enumerate(script, start=1):
        position = Position(index, 0, 0)
        if isinstance(step, Log):
            event = ChangeEvent(
                table=step.table,
                op=Op(step.op),
                position=position,
                key=None if step.key is None else key(step.key),
                after=None,
                before=None,
                origin=Origin.LOG,
                commit_ts_us=index,
                schema_version=1,
            )
            output.append(event)
            reconciler.on_change(event)
        elif isinstance(step, Late):
            late: tuple[tuple[str, str | None], ...] = tuple(
                (step.table, key(name)) for name in step.keys)
            if step.truncate:
                late += ((step.table, None),)
            reconciler.on_unseen(Unseen(late, step.overflow))
        else:
            token = {"lw": tokens.low, "hw": tokens.high}.get(step.kind, step.kind)
            closed = reconciler.on_watermark(Watermark(token, position, index))
            if closed is not None:
                output.extend(dump_events(closed, keys, afters))
    positions = [event.position for event in output]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    return [_render(event) for event in output]


def _render(event: ChangeEvent) -> str:
    name = "*" if event.key is None else event.key[2:-2]
    suffix = "" if event.table == TABLE else f"@{event.table}"
    return f"{event.op.value}:{name}{suffix}"


LW, HW = Mark("lw"), Mark("hw")

CASES: list[tuple[str, list[str], list[Step], list[str]]] = [
    (
        # DBLog paper, figures 3 and 4: k1..k6 selected, k1 and k3 change inside the window.
        "paper k1-k6",
        ["k1", "k2", "k3", "k4", "k5", "k6"],
        [Log("u", "k2"), Log("u", "k3"), LW, Log("u", "k1"), Log("d", "k3"), HW, Log("u", "k4")],
        ["u:k2", "u:k3", "u:k1", "d:k3", "r:k2", "r:k4", "r:k5", "r:k6", "u:k4"],
    ),
    (
        # Debezium incremental snapshots post: K1 inserted, K2 updated, K3 deleted before the
        # window; the query selects K1, K2, K4 (and K5 by timing); K4 deleted, K5 and K6
        # inserted inside the window.
        "debezium K1-K6",
        ["K1", "K2", "K4", "K5"],
        [
            Log("c", "K1"),
            Log("u", "K2"),
            Log("d", "K3"),
            LW,
            Log("d", "K4"),
            Log("c", "K5"),
            Log("c", "K6"),
            HW,
        ],
        ["c:K1", "u:K2", "d:K3", "d:K4", "c:K5", "c:K6", "r:K1", "r:K2"],
    ),
    (
        "empty chunk still passes in-window events",
        [],
        [Log("c", "a"), LW, Log("u", "b"), Log("d", "c"), HW, Log("c", "d")],
        ["c:a", "u:b", "d:c", "c:d"],
    ),
    (
        "key change touches both keys",
        ["a", "b", "c"],
        # UPDATE t SET k = 'z' WHERE k = 'a' arrives as delete a + create z
        [LW, Log("d", "a"), Log("c", "z"), HW],
        ["d:a", "c:z", "r:b", "r:c"],
    ),
    (
        "key change into a selected key",
        ["a", "b"],
        [LW, Log("d", "x"), Log("c", "b"), HW],
        ["d:x", "c:b", "r:a"],
    ),
    (
        "events before LW do not drop rows",
        ["a", "b"],
        [Log("u", "a"), Log("d", "b"), LW, HW],
        ["u:a", "d:b", "r:a", "r:b"],
    ),
    (
        "events after HW do not drop rows",
        ["a"],
        [LW, HW, Log("d", "a")],
        ["r:a", "d:a"],
    ),
    (
        "another table's events pass through and drop nothing",
        ["a"],
        [LW, Log("u", "a", OTHER), HW],
        ["u:a@public.other", "r:a"],
    ),
    (
        "truncate inside the window drops the whole chunk",
        ["a", "b"],
        [LW, Log("t", None), Log("c", "c"), HW],
        ["t:*", "c:c"],
    ),
    (
        "truncate of another table drops nothing",
        ["a"],
        [LW, Log("t", None, OTHER), HW],
        ["t:*@public.other", "r:a"],
    ),
    (
        "stale watermarks of a previous run are ignored",
        ["a", "b"],
        [Mark("old.7.lw"), LW, Mark("old.7.hw"), Log("u", "a"), Mark("old.8.lw"), HW],
        ["u:a", "r:b"],
    ),
    (
        "foreign watermark values are ignored",
        ["a"],
        [Mark("not-a-token"), LW, Mark(""), HW],
        ["r:a"],
    ),
    (
        "a change before LW the SELECT did not see drops its row",
        ["a", "b", "c"],
        [Log("u", "b"), LW, Late(("b",)), HW],
        ["u:b", "r:a", "r:c"],
    ),
    (
        "a truncate before LW the SELECT did not see drops the chunk",
        ["a", "b"],
        [Log("t", None), LW, Late(truncate=True), Log("c", "c"), HW],
        ["t:*", "c:c"],
    ),
    (
        "unseen changes of another table drop nothing",
        ["a", "b"],
        [LW, Late(("b",), table=OTHER), HW],
        ["r:a", "r:b"],
    ),
    (
        "unseen changes too many to keep: the window is read again",
        ["a", "b"],
        [Log("u", "x"), LW, Late((), frozenset({TABLE})), Log("u", "a"), HW],
        ["u:x", "u:a"],
    ),
    (
        "unseen changes of unknown tables: the window is read again",
        ["a"],
        [LW, Late((), frozenset({EVERY_TABLE})), HW],
        [],
    ),
    (
        "too many unseen changes of another table: the window stands",
        ["a"],
        [LW, Late((), frozenset({OTHER})), HW],
        ["r:a"],
    ),
    (
        "unseen changes outside a window are ignored",
        ["a", "b"],
        [Late(("a",), frozenset({TABLE})), LW, HW, Late(("b",))],
        ["r:a", "r:b"],
    ),
    (
        "every row collides",
        ["a", "b"],
        [LW, Log("u", "b"), Log("u", "a"), HW],
        ["u:b", "u:a"],
    ),
]


@pytest.mark.parametrize(("chunk", "script", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_reconciliation(chunk: list[str], script: list[Step], expected: list[str]) -> None:
    assert run_script(chunk, script) == expected


def test_composite_keys_collide_only_on_the_whole_key() -> None:
    reconciler = Reconciler(RUN)
    tokens = reconciler.next_tokens()
    keys = ['[1,"a"]', '[1,"b"]', '[2,"a"]']
    reconciler.open(TABLE, tokens, keys, dump_id="d", schema_version=3)
    reconciler.on_watermark(Watermark(tokens.low, Position(1, 0), 0))
    reconciler.on_change(
        ChangeEvent(TABLE, Op.UPDATE, Position(2, 0), '[1,"b"]', "{}", None, Origin.LOG, 0, 3)
    )
    closed = reconciler.on_watermark(Watermark(tokens.high, Position(3, 0), 42))
    assert closed is not None
    assert list(closed.survivors) == [0, 2]
    events = dump_events(closed, keys, ["{a}", "{b}", "{c}"])
    assert [(e.key, e.after) for e in events] == [('[1,"a"]', "{a}"), ('[2,"a"]', "{c}")]
    assert [e.position for e in events] == [Position(3, 0, 1), Position(3, 0, 2)]
    assert all(e.commit_ts_us == 42 and e.schema_version == 3 for e in events)
    assert all(e.origin is Origin.DUMP and e.op is Op.READ and e.dump_id == "d"
               for e in events)
    assert (closed.selected, closed.dropped) == (3, 1)


MALFORMED: list[tuple[str, list[Step], str]] = [
    ("HW before LW", [HW], "before its low watermark"),
    ("duplicate LW", [LW, LW], "arrived twice"),
    ("unknown token of this run", [LW, Mark(f"{RUN}.99.hw")], "not one of the open window"),
]


@pytest.mark.parametrize(("script", "message"), [c[1:] for c in MALFORMED],
                         ids=[c[0] for c in MALFORMED])
def test_malformed_sequences_raise(script: list[Step], message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        run_script(["a"], script)


def test_watermark_of_this_run_without_open_window_raises() -> None:
    reconciler = Reconciler(RUN)
    with pytest.raises(ProtocolError, match="no window is open"):
        reconciler.on_watermark(Watermark(f"{RUN}.1.lw", Position(1, 0), 0))


def test_windows_open_in_turn_and_close_in_order() -> None:
    """A second window may be opened before the first closes: its LW comes after HW1."""
    reconciler = Reconciler(RUN)
    first, second = reconciler.next_tokens(), reconciler.next_tokens()
    reconciler.open(TABLE, first, ["[1]", "[2]"], "d", 1)
    reconciler.open(TABLE, second, ["[3]", "[4]"], "d", 1)
    assert reconciler.open_windows == 2
    update = ChangeEvent(TABLE, Op.UPDATE, Position(2, 0), "[3]", "{}", None, Origin.LOG, 0, 1)
    reconciler.on_watermark(Watermark(first.low, Position(1, 0), 0))
    reconciler.on_change(update)  # inside window 1: key 3 is not in its chunk
    closed = reconciler.on_watermark(Watermark(first.high, Position(3, 0), 0))
    assert closed is not None and list(closed.survivors) == [0, 1]
    assert not reconciler.watching
    reconciler.on_change(update._replace(key="[4]"))  # between the windows: drops nothing
    reconciler.on_watermark(Watermark(second.low, Position(4, 0), 0))
    reconciler.on_change(update._replace(key="[3]"))
    closed = reconciler.on_watermark(Watermark(second.high, Position(5, 0), 0))
    assert closed is not None and list(closed.survivors) == [1]
    assert not reconciler.open_windows


def test_windows_of_two_dumps_of_one_table_each_keep_their_own_rule() -> None:
    """A backfill's window and a repair's (two requests, one table) open one after the
    other: each closes with its own dump's id, and an event removes a row only from the
    chunk of the window it falls in."""
    reconciler = Reconciler(RUN)
    backfill, repair = reconciler.next_tokens(), reconciler.next_tokens()
    reconciler.open(TABLE, backfill, ["[1]", "[2]", "[3]"], "dump-1", 1)
    reconciler.open(TABLE, repair, ["[2]", "[9]"], "dump-2", 1)
    update = ChangeEvent(TABLE, Op.UPDATE, Position(2, 0), "[2]", "{}", None, Origin.LOG, 0, 1)
    reconciler.on_watermark(Watermark(backfill.low, Position(1, 0), 0))
    reconciler.on_change(update)  # in the backfill's window: its row 2 goes
    closed = reconciler.on_watermark(Watermark(backfill.high, Position(3, 0), 0))
    assert closed is not None and (closed.dump_id, list(closed.survivors)) == ("dump-1",
                                                                               [0, 2])
    reconciler.on_change(update._replace(key="[9]"))  # between the windows: log order
    reconciler.on_watermark(Watermark(repair.low, Position(4, 0), 0))
    closed = reconciler.on_watermark(Watermark(repair.high, Position(5, 0), 0))
    assert closed is not None and (closed.dump_id, list(closed.survivors)) == ("dump-2",
                                                                               [0, 1])


def test_windows_that_overlap_in_the_log_raise() -> None:
    reconciler = Reconciler(RUN)
    first, second = reconciler.next_tokens(), reconciler.next_tokens()
    reconciler.open(TABLE, first, [], "d", 1)
    reconciler.open(TABLE, second, [], "d", 1)
    reconciler.on_watermark(Watermark(first.low, Position(1, 0), 0))
    with pytest.raises(ProtocolError, match="windows overlap"):
        reconciler.on_watermark(Watermark(second.low, Position(2, 0), 0))


def test_states_and_tokens_follow_the_window() -> None:
    reconciler = Reconciler(RUN)
    first, second = reconciler.next_tokens(), reconciler.next_tokens()
    assert (first.low, first.high, second.low) == (f"{RUN}.1.lw", f"{RUN}.1.hw", f"{RUN}.2.lw")
    assert reconciler.window_state is None
    reconciler.open(TABLE, second, [], "d", 1)
    assert reconciler.window_state is WindowState.AWAITING_LOW
    reconciler.on_watermark(Watermark(second.low, Position(1, 0), 0))
    assert reconciler.window_state is WindowState.IN_WINDOW
    closed = reconciler.on_watermark(Watermark(second.high, Position(2, 0), 0))
    assert closed is not None and list(closed.survivors) == [] and not reconciler.open_windows


@pytest.mark.parametrize("run_id", ["", "a.b"])
def test_run_id_must_be_a_plain_name(run_id: str) -> None:
    with pytest.raises(ValueError):
        Reconciler(run_id)


def test_a_window_read_again_says_so() -> None:
    reconciler = Reconciler(RUN)
    tokens = reconciler.next_tokens()
    reconciler.open(TABLE, tokens, [key("a"), key("b")], dump_id="d", schema_version=1)
    reconciler.on_watermark(Watermark(tokens.low, Position(1, 0), 0))
    reconciler.on_unseen(Unseen((), frozenset({TABLE})))
    closed = reconciler.on_watermark(Watermark(tokens.high, Position(2, 0), 0))
    assert closed is not None
    assert closed.retry and list(closed.survivors) == [] and closed.selected == 2


# -- foreign-key action events inside the window ---------------------------------------------


def _fk_event(before: str, after: str, table: str = TABLE, at: int = 5) -> ChangeEvent:
    return ChangeEvent(table, Op.FOREIGN_KEY, Position(at, 0), None, after, before, Origin.LOG,
                       0, 1)


ROWS = ['{"id":"a","pid":7,"x":-0}', '{"id":"b","pid":8,"x":1e+20}',
        '{"id":"c","pid":7,"x":"ü"}', '{"id":"d","pid":9,"x":null}']


def _window(events: Sequence[ChangeEvent], *, before_lw: Sequence[ChangeEvent] = (),
            rows: Sequence[str] = ROWS) -> tuple[list[int], dict[int, str], Position | None]:
    reconciler = Reconciler(RUN)
    tokens = reconciler.next_tokens()
    keys = [key(r.split('"')[3]) for r in rows]
    reconciler.open(TABLE, tokens, keys, "d", 1, rows)
    for event in before_lw:
        reconciler.on_change(event)
    reconciler.on_watermark(Watermark(tokens.low, Position(1, 0), 0))
    for event in events:
        reconciler.on_change(event)
    closed = reconciler.on_watermark(Watermark(tokens.high, Position(9, 0), 0))
    assert closed is not None
    return list(closed.survivors), dict(closed.replaced), closed.low


def test_a_cascade_in_the_window_drops_the_rows_it_deletes_and_rewrites_those_it_sets() -> None:
    deleted = _fk_event('[{"pid":7}]', "[null]")
    assert _window([deleted]) == ([1, 3], {}, Position(1, 0))
    set_null = _fk_event('[{"pid":8}]', '[{"pid":null}]')
    moved = _fk_event('[{"pid":9}]', '[{"pid":10}]', at=6)
    survivors, replaced, _ = _window([set_null, moved])
    assert survivors == [0, 1, 2, 3]
    # the new values in place; every other value keeps its bytes
    assert replaced == {1: '{"id":"b","pid":null,"x":1e+20}', 3: '{"id":"d","pid":10,"x":null}'}
    # in order: 8 -> 9 then 9 -> 10 moves b twice
    survivors, replaced, _ = _window([_fk_event('[{"pid":8}]', '[{"pid":9}]'), moved])
    assert replaced[1] == '{"id":"b","pid":10,"x":1e+20}'


def test_cascades_outside_the_window_or_of_another_table_change_nothing() -> None:
    deleted = _fk_event('[{"pid":7}]', "[null]")
    assert _window([], before_lw=[deleted]) == ([0, 1, 2, 3], {}, Position(1, 0))
    assert _window([_fk_event('[{"pid":7}]', "[null]", table=OTHER)])[:2] == (
        [0, 1, 2, 3], {})


def test_a_cascade_and_a_keyed_event_in_one_window() -> None:
    keyed = ChangeEvent(TABLE, Op.UPDATE, Position(4, 0), key("b"), "{}", None, Origin.LOG, 0, 1)
    assert _window([keyed, _fk_event('[{"pid":9}]', '[{"pid":null}]')])[:2] == (
        [0, 2, 3], {3: '{"id":"d","pid":null,"x":null}'})


def test_a_window_that_reads_an_upper_bound_is_read_again_for_a_change_it_missed() -> None:
    reconciler = Reconciler(RUN)
    tokens = reconciler.next_tokens()
    reconciler.open(TABLE, tokens, [], "d", 1, bound=True)
    reconciler.on_watermark(Watermark(tokens.low, Position(1, 0), 0))
    reconciler.on_unseen(Unseen(((OTHER, key("a")),)))
    reconciler.on_unseen(Unseen(((TABLE, key("a")),)))
    closed = reconciler.on_watermark(Watermark(tokens.high, Position(2, 0), 0))
    assert closed is not None and closed.retry and closed.low == Position(1, 0)
