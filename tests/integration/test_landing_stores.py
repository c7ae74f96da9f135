"""The landing zone on a local folder and on a real S3-compatible store (SeaweedFS), through
the same seams: commits, recovery, fencing by the lease token, a partial upload never read,
compaction and retention while a writer keeps writing."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dblog_worker.errors import LeaseLost
from dblog_worker.events import ChangeEvent, Op, Origin
from dblog_worker.landing.maintenance import plan_table, run_plan
from dblog_worker.landing.parquet import LandingZone, read_events
from dblog_worker.landing.policy import CompactionPolicy, RetentionPolicy
from dblog_worker.landing.s3 import S3LandingZone, segment_key_name
from dblog_worker.landing.s3_objects import Bucket, S3Location
from dblog_worker.landing.sink import LandingAhead, Maintained, Sink, open_reader, open_sink
from dblog_worker.position import Position
from tests.services import SeaweedServer

TABLE = "public.t"
OTHER = "public.other"
Zone = LandingZone | S3LandingZone


def event(major: int, key: int | None = None, table: str = TABLE) -> ChangeEvent:
    key = major if key is None else key
    return ChangeEvent(table, Op.CREATE, Position(major, 0, 0), f"[{key}]",
                       f'{{"id":{key}}}', None, Origin.LOG, 1_700_000_000_000_000, 1)


@dataclass(frozen=True)
class Store:
    open: Callable[[], Zone]  # the zone of source ``src``, anew each call, as a process does
    landing: dict[str, object]  # the [landing] section that names it


@pytest.fixture(params=["posix", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "posix":
        root = tmp_path / "landing"
        return Store(lambda: LandingZone(root, "src"), {"path": str(root)})
    server: SeaweedServer = request.getfixturevalue("seaweed_server")
    bucket = request.getfixturevalue("s3_bucket")
    location = S3Location.parse(f"s3://{bucket}/landing", endpoint=server.endpoint,
                                path_style=True)
    return Store(lambda: S3LandingZone(location, "src"),
                 {"path": location.url, "s3": {"endpoint": server.endpoint,
                                               "path_style": True}})


@pytest.fixture
def opener(store: Store) -> Callable[[], Zone]:
    return store.open


def positions(zone: Zone, table: str = TABLE) -> list[str]:
    return [str(r["position"]) for r in read_events(zone, table)]


def test_commit_recover_read(opener: Callable[[], Zone]) -> None:
    zone = opener()
    zone.fence(1)
    assert zone.recover() == {}
    zone.write_schema(TABLE, 1, {"columns": [], "key": ["id"]})
    zone.write_schema(TABLE, 1, {"columns": [], "key": ["id"]})  # the same again: no-op
    assert zone.commit(TABLE, [event(1), event(2)]) == Position(2, 0, 0)
    assert zone.commit(TABLE, [event(3)]) == Position(3, 0, 0)
    with pytest.raises(LandingAhead):
        zone.commit(TABLE, [event(3)])  # not after the last committed position
    again = opener()
    again.fence(1)
    assert again.recover() == {TABLE: Position(3, 0, 0)}
    assert again.tables() == [TABLE]
    assert [(s.lo, s.seq) for s in again.segments(TABLE)] == [(1, 1), (2, 2)]
    assert [s.last for s in again.segments(TABLE)] == [Position(2, 0, 0), Position(3, 0, 0)]
    assert again.summary(again.segments(TABLE)[0]).rows == 2
    assert len(positions(again)) == 3
    assert again.schemas(TABLE) == {1: {"columns": [], "key": ["id"]}}


def test_a_newer_token_fences_the_older_writer_out(opener: Callable[[], Zone]) -> None:
    old, new = opener(), opener()
    old.fence(1)
    old.recover()
    old.commit(TABLE, [event(1)])
    new.fence(2)  # the next leader
    assert new.recover() == {TABLE: Position(1, 0, 0)}
    with pytest.raises(LeaseLost):
        old.commit(TABLE, [event(2)])  # the old leader, not dead yet
    new.commit(TABLE, [event(2)])
    with pytest.raises(LeaseLost):
        opener().fence(1)  # a token older than a writer's present
    assert positions(opener()) == [Position(1, 0, 0).encode(), Position(2, 0, 0).encode()]
    assert max(opener().writer_tokens()) == 2


def test_a_fenced_writer_cannot_begin_a_table(opener: Callable[[], Zone]) -> None:
    """The old leader's first segment of a table nobody has written yet, after the new
    leader fenced: refused, and nothing of it is visible; the new leader writes it."""
    old, new = opener(), opener()
    old.fence(1)
    old.recover()
    old.commit(TABLE, [event(1)])
    new.fence(2)
    new.recover()
    with pytest.raises(LeaseLost):
        old.commit(OTHER, [event(7, table=OTHER)])
    assert positions(opener(), OTHER) == []
    new.commit(OTHER, [event(5, table=OTHER)])
    assert positions(opener(), OTHER) == [Position(5, 0, 0).encode()]
    again = opener()
    again.fence(2)
    assert again.recover() == {TABLE: Position(1, 0, 0), OTHER: Position(5, 0, 0)}


def test_a_new_table_begun_while_the_next_leader_fences(
        seaweed_server: SeaweedServer, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the fence object closes: the old leader has recorded the new table in
    ``_fence.json`` and is about to upload its first segment when the next leader
    fences, before anything of the table is in the bucket. The new leader fences that
    table too (it creates its head), so the old leader's head creation fails: LeaseLost,
    and its segment is never read."""
    location = S3Location.parse(f"s3://{s3_bucket}", endpoint=seaweed_server.endpoint,
                                path_style=True)
    old, new = S3LandingZone(location, "src"), S3LandingZone(location, "src")
    old.fence(1)
    old.recover()
    upload = old.bucket.put

    def fence_then_put(key: str, body: bytes, **options: object) -> str:
        if key.endswith(segment_key_name(1, 1)):
            new.fence(2)  # the table has no object yet: only _fence.json names it
        return upload(key, body, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(old.bucket, "put", fence_then_put)
    with pytest.raises(LeaseLost):
        old.commit(OTHER, [event(7, table=OTHER)])
    assert new.recover() == {}  # the stray segment after the head is removed
    new.commit(OTHER, [event(5, table=OTHER)])
    assert positions(S3LandingZone(location, "src"), OTHER) == [Position(5, 0, 0).encode()]
    assert S3LandingZone(location, "src").writer_tokens() == [2]


def test_an_uncommitted_segment_is_never_read_and_is_cleared(
        seaweed_server: SeaweedServer, s3_bucket: str) -> None:
    """A crash between a segment's PUT and its head's swap (or a fenced writer's PUT)."""
    location = S3Location.parse(f"s3://{s3_bucket}", endpoint=seaweed_server.endpoint,
                                path_style=True)
    zone = S3LandingZone(location, "src")
    zone.fence(3)
    zone.commit(TABLE, [event(1)])
    stray = "src/public.t/" + segment_key_name(2, 2)
    Bucket(location).put(stray, b"PAR1 not even a whole parquet file")
    assert [s.seq for s in S3LandingZone(location, "src").segments(TABLE)] == [1]
    zone.commit(TABLE, [event(2)])  # the stray object is in its way: removed, then written
    assert positions(zone) == [Position(1, 0, 0).encode(), Position(2, 0, 0).encode()]
    Bucket(location).put("src/public.t/" + segment_key_name(3, 3), b"junk")
    later = S3LandingZone(location, "src")
    later.fence(3)
    assert later.recover() == {TABLE: Position(2, 0, 0)}
    with pytest.raises(FileNotFoundError):
        Bucket(location).head("src/public.t/" + segment_key_name(3, 3))


def test_through_the_registry_and_the_configuration(s3_bucket: str,
                                                     seaweed_server: SeaweedServer) -> None:
    from dblog_worker import config as config_module

    config = config_module.parse({
        "source": {"name": "src", "dsn": "host=127.0.0.1", "tables": [TABLE]},
        "redis": {"url": "redis://127.0.0.1:1"},
        "landing": {"path": f"s3://{s3_bucket}/x/y",
                    "s3": {"endpoint": seaweed_server.endpoint, "path_style": True}},
    }, {})
    sink: Sink = open_sink(config.landing_path, "src", config.landing_format)
    sink.fence(1)
    sink.recover()
    sink.commit(TABLE, [event(5)])
    reader = open_reader(config.landing_path, "src")
    assert reader.where == f"s3://{s3_bucket}/x/y/src"
    assert [s.location for s in reader.segments(TABLE)] == [
        f"s3a://{s3_bucket}/x/y/src/public.t/segment-000000000001.parquet"]


def commit_many(zone: Zone, start: int, count: int) -> None:
    for major in range(start, start + count):
        zone.commit(TABLE, [event(major)])


def test_compaction_keeps_every_event_once_in_order(opener: Callable[[], Zone]) -> None:
    zone = opener()
    zone.fence(1)
    zone.recover()
    commit_many(zone, 1, 12)
    before = read_events(zone, TABLE)
    now = time.time() + 1
    policy = CompactionPolicy(target_bytes=10**9, min_age_s=0, grace_s=60)
    maintained: Maintained = opener()
    plan = plan_table(maintained, TABLE, now, compaction=policy)
    assert [(run[0].lo, run[-1].seq) for run in plan.compact] == [(1, 12)]
    report = run_plan(maintained, plan)
    assert report.compacted_files == 12
    assert [(s.lo, s.seq) for s in opener().segments(TABLE)] == [(1, 12)]
    assert read_events(opener(), TABLE) == before
    # the replaced files stay a grace period, then go
    files = opener().files(TABLE)
    assert len(files.segments) == 13
    assert plan_table(maintained, TABLE, now, compaction=policy).expire == []
    # grace_s after the compacted file appeared (the run may take seconds on a busy store)
    later = plan_table(maintained, TABLE, time.time() + 61, compaction=policy)
    assert len(later.expire) == 12
    run_plan(maintained, later)
    assert len(opener().files(TABLE).segments) == 1
    # the writer goes on after the compacted run
    zone.commit(TABLE, [event(13)])
    fresh = opener()
    fresh.fence(1)
    assert fresh.recover() == {TABLE: Position(13, 0, 0)}
    assert [(s.lo, s.seq) for s in fresh.segments(TABLE)] == [(1, 12), (13, 13)]


def test_retention_removes_only_what_every_target_merged(opener: Callable[[], Zone]) -> None:
    zone = opener()
    zone.fence(1)
    zone.recover()
    commit_many(zone, 1, 6)
    now = time.time() + 1
    keep = RetentionPolicy(keep_s=0)
    plan = plan_table(opener(), TABLE, now, retention=keep, merged_seq=4)
    assert [s.seq for s in plan.retire] == [1, 2, 3, 4]
    assert plan_table(opener(), TABLE, now, retention=RetentionPolicy(keep_s=3600),
                      merged_seq=4).retire == []  # not old enough
    assert [s.seq for s in plan_table(opener(), TABLE, now, retention=keep,
                                      merged_seq=6).retire] == [1, 2, 3, 4, 5]  # not the last
    run_plan(opener(), plan)
    assert [s.seq for s in opener().segments(TABLE)] == [5, 6]
    zone.commit(TABLE, [event(7)])
    assert [s.seq for s in opener().segments(TABLE)] == [5, 6, 7]


def test_compaction_beside_a_writer_and_a_reader(opener: Callable[[], Zone]) -> None:
    """The worker commits, compaction runs (replaced files deleted at once: no grace),
    and a reader lists and reads again and again: it never sees a hole or an event twice,
    and what it reads is always a prefix of what was written."""
    writer = opener()
    writer.fence(1)
    writer.recover()
    commit_many(writer, 1, 5)
    stop = threading.Event()
    problems: list[str] = []
    done = {"written": 0, "compactions": 0, "reads": 0}
    policy = CompactionPolicy(target_bytes=10**9, min_age_s=0, grace_s=0)

    def write() -> None:
        major = 6
        while not stop.is_set() and major < 400:
            writer.commit(TABLE, [event(major)])
            major += 1
            done["written"] += 1

    def compact() -> None:
        zone = opener()
        while not stop.is_set():
            report = run_plan(zone, plan_table(zone, TABLE, time.time() + 1, compaction=policy))
            done["compactions"] += report.compacted_files > 0

    def read() -> None:
        zone = opener()
        reads = 0
        while not stop.is_set() or reads < 3:
            try:
                seen = [int(p[:16], 16) for p in positions(zone)]
            except FileNotFoundError:
                continue  # a file it listed was deleted since: list again
            reads += 1
            done["reads"] += 1
            if seen != list(range(1, len(seen) + 1)):
                problems.append(f"read {seen[:5]}...{seen[-5:]} ({len(seen)} events)")

    threads = [threading.Thread(target=f) for f in (write, compact, read)]
    for thread in threads:
        thread.start()
    # until compaction has run twice under the writer and the reader
    deadline = time.monotonic() + 120
    while (done["compactions"] < 2 or done["written"] < 20 or done["reads"] < 3) \
            and time.monotonic() < deadline and all(t.is_alive() for t in threads[1:]):
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert problems == []
    assert done["compactions"] >= 2, done
    final = opener()
    seen = [int(p[:16], 16) for p in positions(final)]
    assert seen == list(range(1, len(seen) + 1)) and len(seen) > 20


def test_the_store_serializes_conditional_puts(seaweed_server: SeaweedServer,
                                               s3_bucket: str) -> None:
    """What the design relies on, checked on the server: of many concurrent PUTs with
    If-None-Match: * of one key, exactly one succeeds; of many with If-Match of one ETag,
    exactly one."""
    from concurrent.futures import ThreadPoolExecutor

    from dblog_worker.landing.s3_objects import PreconditionFailed

    location = S3Location.parse(f"s3://{s3_bucket}", endpoint=seaweed_server.endpoint,
                                path_style=True)
    bucket = Bucket(location)

    def attempt(put: Callable[[], str]) -> bool:
        try:
            put()
        except PreconditionFailed:
            return False
        return True

    with ThreadPoolExecutor(16) as pool:
        created = list(pool.map(lambda i: attempt(lambda: bucket.put(
            "claim", f"writer {i}".encode(), if_none_match=True)), range(16)))
        assert created.count(True) == 1
        _, etag = bucket.get("claim")
        swapped = list(pool.map(lambda i: attempt(lambda: bucket.put(
            "claim", f"swap {i}".encode(), if_match=etag)), range(16)))
        assert swapped.count(True) == 1


# A compaction run in a process of its own that kills itself (SIGKILL) at one step.
KILLED_RUN = """
import json, os, signal, sys
from dblog_worker import config, lifecycle

landing, kill_at = json.loads(sys.argv[1]), sys.argv[2]
settings = config.parse({"source": {"name": "src", "dsn": "host=127.0.0.1",
                                    "tables": ["public.t"]},
                         "redis": {"url": "redis://127.0.0.1:1"}, "landing": landing}, {})


def step(name):
    if kill_at and name.startswith(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)


print(json.dumps(lifecycle.maintain(settings, compact=True, retain=False,
                                    step=step).as_dict()))
"""


def maintain_killed_at(store: Store, kill_at: str) -> dict[str, object] | None:
    """Run ``dblog landing compact``'s code in a subprocess, SIGKILLed at the first step
    named ``kill_at`` (None: it ran to the end; its report)."""
    landing = {**store.landing, "compaction": {"min_age_s": 0, "grace_s": 0}}
    result = subprocess.run([sys.executable, "-c", KILLED_RUN, json.dumps(landing), kill_at],
                            capture_output=True, text=True, timeout=120)
    if result.returncode == -9:
        return None
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, object] = json.loads(result.stdout)
    assert report["ok"], report
    return report


def test_kill_9_at_every_step_of_compaction(store: Store) -> None:
    """A compaction run killed (SIGKILL, in its own process) before it reads, once its file
    is ready, once it has appeared, before its deletions and halfway through them, while
    a writer goes on: readers always read every event once, in order, and a later run
    finishes the work (on a folder, removing what the killed runs left behind)."""
    writer = store.open()
    writer.fence(1)
    writer.recover()
    commit_many(writer, 1, 12)
    major = 13
    posix = "s3" not in store.landing
    maintenance = Path(str(store.landing["path"])) / "src" / ".maintenance"

    def leftovers() -> list[Path]:
        return sorted(maintenance.glob(".tmp-*"))

    for kill_at in ["compact ", "publish ", "published ", "remove ", "removed "]:
        assert maintain_killed_at(store, kill_at) is None, f"not killed at {kill_at}"
        seen = [int(p[:16], 16) for p in positions(store.open())]
        assert seen == list(range(1, major)), (kill_at, seen)
        files = store.open().files(TABLE)
        if kill_at == "publish " and posix:
            assert leftovers()  # written and fsynced, never linked
        if kill_at == "published ":
            assert [(s.lo, s.seq) for s in files.active] == [(1, major - 1)]
            assert len(files.segments) == major  # the originals stay a grace period
        writer.commit(TABLE, [event(major)])  # the worker goes on
        major += 1

    old = time.time() - 60  # what killed runs left, old enough to go
    for path in leftovers():
        os.utime(path, (old, old))
    while True:  # again until nothing is left to do
        report = maintain_killed_at(store, "")
        assert report is not None
        table = report["tables"][0]  # type: ignore[index]
        if not table["compact"] and not table["remove_replaced"]:
            break
    assert leftovers() == []
    files = store.open().files(TABLE)
    assert [(s.lo, s.seq) for s in files.active] == [(1, major - 1)]
    assert len(files.segments) == 1
    assert [int(p[:16], 16) for p in positions(store.open())] == list(range(1, major))


def test_what_a_killed_compaction_leaves_on_a_folder_is_removed(tmp_path: Path) -> None:
    """Its file under .maintenance/: left alone while young (a run may have just created
    it) or while a live run holds it, removed by the next maintenance run or the worker's
    start otherwise."""
    root = tmp_path / "landing"
    store = Store(lambda: LandingZone(root, "src"), {"path": str(root)})
    writer = store.open()
    writer.fence(1)
    writer.recover()
    commit_many(writer, 1, 3)
    assert maintain_killed_at(store, "publish ") is None
    maintenance = root / "src" / ".maintenance"
    [crashed] = maintenance.glob(".tmp-*")
    store.open().recover()
    assert crashed.exists()  # young
    live = maintenance / ".tmp-of-a-live-run"
    held = os.open(live, os.O_CREAT | os.O_WRONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        old = time.time() - 60
        for path in (crashed, live):
            os.utime(path, (old, old))
        report = maintain_killed_at(store, "")
        assert report is not None and report["cleaned_files"] == 1
        assert sorted(maintenance.iterdir()) == [live]
    finally:
        os.close(held)  # the run is killed: its lock goes with it
    fresh = store.open()
    fresh.fence(2)
    fresh.recover()  # what the worker's session does at its start
    assert list(maintenance.iterdir()) == []
