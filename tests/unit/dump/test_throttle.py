"""Automatic throttling: the controller's decisions, the policy's checks and its record."""

from __future__ import annotations

import pytest

from dblog_worker.dump.active import ActiveDump
from dblog_worker.dump.pacing import Pacer
from dblog_worker.dump.requests import DumpKind, DumpRequest, RequestState
from dblog_worker.dump.throttle import (
    FLOOR_MS,
    MAX_THROTTLE_MS,
    MB,
    NO_THROTTLE,
    Signals,
    Throttle,
    ThrottlePolicy,
    check_limit,
)
from dblog_worker.errors import CorruptRequest, RequestRejected, SourceUnavailable

CHUNK = ThrottlePolicy(max_chunk_ms=100)


def test_over_the_limit_doubles_the_delay_up_to_the_cap() -> None:
    throttle = Throttle()
    delays = [throttle.decide(CHUNK, Signals(chunk_ms=412), window=True) for _ in range(12)]
    assert delays[:4] == [FLOOR_MS, 2 * FLOOR_MS, 4 * FLOOR_MS, 8 * FLOOR_MS]
    assert delays[-1] == MAX_THROTTLE_MS
    assert throttle.reason == "chunk SELECT 412 ms > 100 ms"
    assert throttle.over == ("chunk_ms",)
    assert throttle.describe() == "+30000 ms (chunk SELECT 412 ms > 100 ms)"


def test_under_the_limit_it_eases_back_to_nothing() -> None:
    throttle = Throttle()
    for _ in range(5):
        throttle.decide(CHUNK, Signals(chunk_ms=500), window=True)
    before = throttle.delay_ms
    eased = throttle.decide(CHUNK, Signals(chunk_ms=20), window=True)
    assert 0 < eased < before
    assert throttle.reason == "easing: every signal under its limit"
    for _ in range(30):
        throttle.decide(CHUNK, Signals(chunk_ms=20), window=False)
    assert throttle.delay_ms == 0 and throttle.reason == "" and throttle.over == ()
    assert throttle.describe() == "none (chunk SELECT 20 ms)"
    assert Throttle().describe() == "none"


def test_near_the_limit_it_holds() -> None:
    throttle = Throttle()
    throttle.decide(CHUNK, Signals(chunk_ms=200), window=True)
    assert throttle.decide(CHUNK, Signals(chunk_ms=90), window=True) == FLOOR_MS
    assert throttle.reason == "holding: chunk SELECT 90 ms <= 100 ms"


def test_while_waiting_it_never_steps_up() -> None:
    throttle = Throttle()
    throttle.decide(CHUNK, Signals(chunk_ms=200), window=True)
    assert throttle.decide(CHUNK, Signals(chunk_ms=200), window=False) == FLOOR_MS


def test_the_reason_names_the_signal_furthest_over() -> None:
    policy = ThrottlePolicy(max_chunk_ms=100, max_active_sessions=20, max_log_lag_mb=10)
    throttle = Throttle()
    throttle.decide(policy, Signals(chunk_ms=120, active_sessions=37, log_lag_bytes=5 * MB),
                    window=True)
    assert throttle.reason == "37 active sessions > 20"
    assert throttle.over == ("active_sessions", "chunk_ms")
    throttle.decide(policy, Signals(chunk_ms=50, active_sessions=3, log_lag_bytes=64 * MB),
                    window=True)
    assert throttle.reason == "log lag 64.0 MiB > 10 MiB"


def test_signals_not_read_and_limits_off_are_left_out() -> None:
    throttle = Throttle()
    policy = ThrottlePolicy(max_replica_lag_ms=1000)
    assert throttle.decide(policy, Signals(chunk_ms=10_000), window=True) == 0
    assert throttle.readings == []
    throttle.decide(policy, Signals(replica_lag_ms=5000), window=True)
    assert throttle.reason == "replica lag 5000 ms > 1000 ms"


def test_a_policy_turned_off_drops_the_delay_at_once() -> None:
    throttle = Throttle()
    for _ in range(4):
        throttle.decide(CHUNK, Signals(chunk_ms=500), window=True)
    assert throttle.decide(NO_THROTTLE, Signals(chunk_ms=500), window=True) == 0
    assert (throttle.reason, throttle.over) == ("", ())


@pytest.mark.parametrize(("given", "message"), [
    ({"max_chunk_ms": -1}, "throttle max_chunk_ms (a window's chunk SELECT wall time) must be "
                           "an integer number of milliseconds from 0 (off) to 3600000, got -1"),
    ({"max_active_sessions": True}, "must be an integer number of sessions"),
    ({"max_log_lag_mb": "5"}, "got '5'"),
    ({"max_replica_lag_ms": 86_400_001}, "from 0 (off) to 86400000"),
    ({"max_cpu": 5}, "unknown throttle limit 'max_cpu': the limits are max_chunk_ms, "
                     "max_active_sessions, max_replica_lag_ms, max_log_lag_mb"),
])
def test_bad_limits_are_refused(given: dict[str, object], message: str) -> None:
    with pytest.raises(RequestRejected) as info:
        ThrottlePolicy.of(given)
    assert message in str(info.value)


def test_a_policy_from_values() -> None:
    assert ThrottlePolicy.of(None) == NO_THROTTLE and not NO_THROTTLE.on
    policy = ThrottlePolicy.of({"max_chunk_ms": 100, "max_active_sessions": 0})
    assert policy == CHUNK and policy.on
    assert check_limit("max_chunk_ms", 0) == 0
    assert policy.describe() == "chunk SELECT <= 100 ms"
    assert NO_THROTTLE.describe() == "off"


def _request(**fields: str) -> dict[str, str]:
    record = DumpRequest(id="dump-1", kind=DumpKind.TABLES, tables=("public.t",),
                         chunk_size=500, delay_ms=0, state=RequestState.RUNNING,
                         created_at=1.0, updated_at=2.0).to_fields()
    record.update(fields)
    return record


def test_a_request_written_before_the_throttle_reads_as_off() -> None:
    record = _request()
    assert not any(name.startswith("throttle_") for name in record)
    request = DumpRequest.from_fields(record)
    assert request.throttle == NO_THROTTLE and request.extra == {}


def test_the_policy_round_trips_through_the_record() -> None:
    policy = ThrottlePolicy(max_chunk_ms=100, max_active_sessions=20, max_replica_lag_ms=500,
                            max_log_lag_mb=64)
    record = _request(throttle_max_chunk_ms="100", throttle_max_active_sessions="20",
                      throttle_max_replica_lag_ms="500", throttle_max_log_lag_mb="64")
    request = DumpRequest.from_fields(record)
    assert request.throttle == policy and request.extra == {}
    assert DumpRequest.from_fields(request.to_fields()) == request


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("throttle_max_chunk_ms", "fast", "is 'fast', not an integer"),
    ("throttle_max_chunk_ms", "-5", "is '-5', not an integer"),
    ("throttle_max_active_sessions", "100001", "from 0 (off) to 100000, got 100001"),
    ("throttle_max_log_lag_mb", "", "is '', not an integer"),
])
def test_a_bad_limit_in_the_record_is_named(field: str, value: str, reason: str) -> None:
    with pytest.raises(CorruptRequest) as info:
        DumpRequest.from_fields(_request(**{field: value}), key="dblog:s:request:dump-1")
    assert field in str(info.value) and reason in str(info.value)
    assert "dblog:s:request:dump-1" in str(info.value)


# -- the session's reading of the signals (pacing.py) ---------------------------------------------


class _Source:
    """What the session's throttle reads of a source, counted."""

    def __init__(self, sessions: int = 0, error: Exception | None = None) -> None:
        self.sessions, self.error = sessions, error
        self.queries = 0
        self.lag = 0

    def active_sessions(self) -> int:
        self.queries += 1
        if self.error is not None:
            raise self.error
        return self.sessions

    def replica_lag_ms(self) -> float | None:
        self.queries += 1
        return None

    def lag_bytes(self) -> int:
        self.lag += 1
        return 64 * MB


def _dump(policy: ThrottlePolicy) -> ActiveDump:
    request = DumpRequest(id="dump-1", kind=DumpKind.TABLES, tables=("public.t",),
                          chunk_size=500, delay_ms=0, state=RequestState.RUNNING,
                          created_at=1.0, updated_at=2.0, throttle=policy)
    return ActiveDump(request, {})


def test_the_source_is_read_at_most_once_a_second_whatever_the_windows() -> None:
    source = _Source(sessions=37)
    pacer, dump = Pacer(source, source), _dump(ThrottlePolicy(max_active_sessions=20,
                                                           max_log_lag_mb=10))
    for i in range(20):  # 20 windows closing within 0.2 s
        dump.unpaced = True
        pacer.pace(dump, 100.0 + i / 100)
    assert (source.queries, source.lag) == (1, 1)
    assert dump.throttle.reason == "log lag 64.0 MiB > 10 MiB"  # the furthest over
    assert dump.throttle.over == ("log_lag", "active_sessions")
    assert dump.throttle.delay_ms == MAX_THROTTLE_MS  # doubled at each window, to the cap
    dump.unpaced = True
    pacer.pace(dump, 101.5)
    assert (source.queries, source.lag) == (2, 2)


def test_a_signal_that_cannot_be_read_is_left_out() -> None:
    source = _Source(error=RuntimeError("permission denied for pg_stat_activity"))
    pacer, dump = Pacer(source, source), _dump(ThrottlePolicy(max_active_sessions=20))
    dump.unpaced = True
    pacer.pace(dump, 100.0)
    assert dump.throttle.delay_ms == 0 and dump.throttle.readings == []
    assert pacer.failed == "permission denied for pg_stat_activity"


def test_a_source_gone_ends_the_session() -> None:
    source = _Source(error=SourceUnavailable("the source database is unreachable"))
    pacer, dump = Pacer(source, source), _dump(ThrottlePolicy(max_active_sessions=20))
    dump.unpaced = True
    with pytest.raises(SourceUnavailable):
        pacer.pace(dump, 100.0)


def test_without_a_policy_nothing_is_read() -> None:
    source = _Source(sessions=99)
    pacer, dump = Pacer(source, source), _dump(NO_THROTTLE)
    dump.unpaced = True
    pacer.pace(dump, 100.0)
    assert (source.queries, source.lag, dump.unpaced) == (0, 0, False)
