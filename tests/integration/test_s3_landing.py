"""The worker with its landing zone on a real S3-compatible store (SeaweedFS, started by the
suite): the convergence suite's dumps under load and through kill -9, the store killed
mid-dump, then compaction, a Spark merge read through S3A (``dblog merge``: spark-submit
with hadoop-aws and the AWS SDK modules it calls) into a PostgreSQL target, and ``dblog verify``."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dblog_worker.landing.s3_objects import S3Location
from dblog_worker.landing.sink import open_reader
from tests.integration.harness import (
    KILLED_LEASE,
    ROOT,
    SOURCE,
    Backend,
    PgDatabase,
    WorkerProcess,
    Workers,
    assert_converged,
    assert_landed_once,
    checkpoint,
    checkpoint_position,
    cli,
    dump,
    dump_through_kills,
    dumps_under_load,
    events_of,
    wait_for,
    wait_request,
)
from tests.services import PostgresServer, SeaweedServer
from tests.tls import server_files


@pytest.fixture
def backend(redis_url: str, tmp_path: Path, postgres_server: PostgresServer, pg_dsn: str,
            seaweed_server: SeaweedServer, s3_bucket: str) -> Backend:
    """A PostgreSQL source whose worker lands in a fresh bucket."""
    location = S3Location.parse(f"s3://{s3_bucket}/landing", endpoint=seaweed_server.endpoint,
                                path_style=True)
    return Backend(PgDatabase(pg_dsn), redis_url, tmp_path, postgres_server.restart,
                   s3=location)


@pytest.fixture
def worker_process(backend: Backend) -> Iterator[Callable[..., WorkerProcess]]:
    with Workers(backend.tmp / "worker.log") as workers:
        yield workers.start


def test_dumps_converge_under_load_on_s3(backend: Backend,
                                         worker_process: Callable[..., WorkerProcess]) -> None:
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 1500)
    backend.create(t2, 800)
    config = backend.config_path([t1, t2])
    dumps_under_load(backend, config, worker_process(config), "all")
    assert_converged(backend, t1, t2)
    assert_landed_once(backend, t1, t2)


def test_kill_9_during_dump_resumes_on_s3(backend: Backend,
                                          worker_process: Callable[..., WorkerProcess]) -> None:
    """SIGKILL three times mid-dump, mid-upload as it falls: each new worker fences the
    heads, clears what was not committed, and resumes; no event lands twice."""
    t1, t2 = backend.t1, backend.t2
    backend.create(t1, 4000)
    backend.create(t2, 2000)
    rnd = random.Random(7)
    dump_through_kills(
        backend, backend.config_path([t1, t2], flush_interval_s=0.1, extra=KILLED_LEASE),
        worker_process, ["--all", "--chunk-size", "100", "--delay-ms", "20"], [8, 20, 35],
        rnd)


def test_the_store_killed_mid_dump(backend: Backend, seaweed_server: SeaweedServer,
                                   worker_process: Callable[..., WorkerProcess]) -> None:
    """The object store dies (SIGKILL) mid-dump and comes back 3 s later: the worker's
    writes fail, its sessions start again from the checkpoint, the dump completes and the
    output converges with no event twice."""
    t1 = backend.t1
    backend.create(t1, 3000)
    config = backend.config_path([t1], flush_interval_s=0.1)
    worker = worker_process(config)
    request_id = dump(config, "--table", t1, "--chunk-size", "50", "--delay-ms", "10")
    time.sleep(1.0)
    seaweed_server.kill()
    with backend.connect() as session:
        for key in range(10, 400, 10):
            session.execute(f"UPDATE {t1} SET version = {backend.next_version}"
                            f" WHERE id = {key}")
    time.sleep(3)
    seaweed_server.restart()
    state = wait_request(backend.redis_url, SOURCE, request_id, ["completed", "failed"], 120,
                         worker)
    assert state["state"] == "completed", state
    assert "cannot write the landing zone" in worker.log()
    assert_converged(backend, t1)
    assert_landed_once(backend, t1)


def test_a_full_bucket_quota(backend: Backend, seaweed_server: SeaweedServer, s3_bucket: str,
                             worker_process: Callable[..., WorkerProcess]) -> None:
    """The bucket goes over its quota (SeaweedFS makes it read only) while changes come:
    the worker's writes are refused, it says why and stays alive, its sessions start again
    from a checkpoint that stays before what could not land; the quota raised, it goes on,
    and nothing is lost or landed twice."""
    t1 = backend.t1
    backend.create(t1, 0)
    config = backend.config_path([t1], flush_interval_s=0.1)
    worker = worker_process(config)
    backend.execute(f"INSERT INTO {t1} VALUES (1, {backend.next_version}, 'first')")
    wait_for(lambda: len(events_of(backend, t1)) == 1, 30, "the first segment", worker.log)
    seaweed_server.client().put_object(Bucket=s3_bucket, Key="filler",
                                       Body=os.urandom(3 * 1024 * 1024))
    # SeaweedFS counts the bucket's size from its volume servers' heartbeats: under a full
    # run's load that took more than 30 s once
    answers = [""]

    def read_only() -> bool:
        answers[0] = seaweed_server.set_quota(s3_bucket, 1)
        return "to read only" in answers[0]

    wait_for(read_only, 120, "the bucket to go read only",
             lambda: "weed shell's last answer:\n" + answers[0])
    backend.execute(f"INSERT INTO {t1} VALUES (2, {backend.next_version}, 'blocked')")
    blocked_end = backend.log_end()  # the checkpoint stays before this
    with backend.connect() as session:
        for key in range(3, 40):
            session.execute(f"INSERT INTO {t1} VALUES ({key}, {backend.next_version}, 'x')")
            session.execute(f"UPDATE {t1} SET version = {backend.next_version}"
                            f" WHERE id = {key - 1}")
    wait_for(lambda: worker.log().count("cannot write the landing zone") >= 2, 60,
             "the worker to report the refused writes, twice", worker.log)
    assert "refused (" in worker.log()  # the store's answer, named
    for _ in range(20):
        saved = checkpoint(backend.redis_url)
        assert saved is not None
        assert checkpoint_position(backend, saved) < blocked_end, (saved, blocked_end)
        assert worker.alive(), worker.log()[-3000:]
        time.sleep(0.1)
    assert [e["key"] for e in events_of(backend, t1)] == ["[1]"]
    assert "to writable" in seaweed_server.set_quota(s3_bucket, 1000)
    assert_converged(backend, t1)
    assert_landed_once(backend, t1)
    assert worker.alive()


def test_landing_over_tls_with_a_ca_bundle(tmp_path: Path, redis_url: str, pg_dsn: str,
                                           postgres_server: PostgresServer,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The store serves HTTPS with a certificate of a CA made here: with
    ``ca_bundle`` naming that CA the worker lands and readers read; without it, a reader
    refuses and says the certificate did not verify."""
    files = server_files(tmp_path / "tls")
    with SeaweedServer(tls=files).start() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        bucket = server.create_bucket("tls-landing")
        location = S3Location.parse(f"s3://{bucket}/landing", endpoint=server.endpoint,
                                    path_style=True, ca_bundle=str(files.ca))
        assert location.endpoint.startswith("https://")
        backend = Backend(PgDatabase(pg_dsn), redis_url, tmp_path, postgres_server.restart,
                          s3=location)
        t1 = backend.t1
        backend.create(t1, 300)
        config = backend.config_path([t1], flush_interval_s=0.1)
        with Workers(tmp_path / "worker.log") as workers:
            worker = workers.start(config)
            request_id = dump(config, "--table", t1, "--chunk-size", "50")
            wait_request(redis_url, SOURCE, request_id, ["completed"], 90, worker)
            assert_converged(backend, t1)
            status = json.loads(cli(config, "landing", "status", "--json").stdout)
            assert status[0]["table"] == t1 and status[0]["files"] > 0, status
        untrusting = tmp_path / "untrusting.toml"
        untrusting.write_text(config.read_text().replace(
            f', ca_bundle = "{files.ca}"', ""))
        refused = cli(untrusting, "landing", "status", check=False)
        assert refused.returncode != 0
        assert "CERTIFICATE_VERIFY_FAILED" in refused.stdout + refused.stderr, refused


@pytest.mark.timeout(900)  # three spark-submits with the S3A jars
def test_merge_from_s3_then_verify(backend: Backend, postgres_server: PostgresServer,
                                   worker_process: Callable[..., WorkerProcess],
                                   tmp_path: Path) -> None:
    """Capture to S3 with many small segments, merge with spark-submit reading s3a://,
    verify EQUAL; more changes, compact while the worker runs (the run straddles what the
    target merged: the merge log falls inside it), merge, verify; a segment after what was
    merged, then retention removes what the target merged (never that newest segment), and
    a last merge after it finds nothing lost."""
    t1 = backend.t1
    backend.create(t1, 600)  # keys 10, 20, ..., 6000
    target = postgres_server.create_database(f"target_{int(time.time() * 1000) % 10**9}")
    extra = (f'\n[target]\nkind = "postgresql"\ndsn = "{target}"\n'
             '[merge]\nmaster = "local[2]"\nbatch_max_events = 400\n'
             'spark_conf = { "spark.driver.extraJavaOptions" = "-XX:TieredStopAtLevel=1",'
             ' "spark.ui.enabled" = "false" }\n')
    config = backend.config_path([t1], flush_interval_s=0.05, extra=extra)
    text = config.read_text().replace(
        "\nflush_interval_s", "\ncompaction = { min_age_s = 0, grace_s = 0 }\n"
        "retention = { keep_h = 0 }\nflush_interval_s", 1)
    config.write_text(text)
    worker = worker_process(config)
    request_id = dump(config, "--table", t1, "--chunk-size", "20", "--delay-ms", "80")
    wait_request(backend.redis_url, SOURCE, request_id, ["completed"], 90, worker)
    zone = open_reader(backend.landing_root, SOURCE)
    assert len(zone.segments(t1)) > 10

    def merge() -> None:
        result = subprocess.run(
            [sys.executable, "-m", "dblog_worker", "merge", "--config", str(config), "--json"],
            capture_output=True, text=True, timeout=400, cwd=ROOT)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        report = json.loads(result.stdout[result.stdout.index("{"):])
        assert report["ok"], report

    def verify() -> None:
        result = cli(config, "verify", "--json", check=False, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr

    def landed_after(seq: int) -> None:
        wait_for(lambda: zone.segments(t1)[-1].seq > seq, 30,
                 f"a segment of {t1} after segment {seq}", worker.log)

    merge()
    verify()
    merged = zone.segments(t1)[-1].seq
    with backend.connect() as session:
        for key in range(10, 3000, 30):
            session.execute(f"UPDATE {t1} SET version = {backend.next_version}"
                            f" WHERE id = {key}")
        session.execute(f"DELETE FROM {t1} WHERE id > 5500")
    landed_after(merged)
    for round_ in range(3):
        with backend.connect() as session:
            session.execute(f"UPDATE {t1} SET version = {backend.next_version}"
                            f" WHERE id < 200")
        landed_after(merged + 1 + round_)
    compacted = json.loads(cli(config, "landing", "compact", "--json").stdout)
    [run] = compacted["tables"][0]["compact"]
    assert run["segments"].startswith("1-") and compacted["tables"][0]["compacted_files"] > 10
    assert zone.segments(t1)[0].seq > merged  # the compacted run straddles the merge log
    merge()
    verify()

    last = zone.segments(t1)[-1].seq
    with backend.connect() as session:  # a segment after everything merged: it stays
        session.execute(f"UPDATE {t1} SET version = {backend.next_version} WHERE id = 20")
    landed_after(last)
    dry = json.loads(cli(config, "landing", "retain", "--dry-run", "--json").stdout)
    planned = dry["tables"][0]["remove_merged"]
    assert planned and dry["tables"][0]["merged_segment"] == last, dry
    assert all(int(p["segments"].split("-")[1]) <= last for p in planned), planned
    done = json.loads(cli(config, "landing", "retain", "--json").stdout)
    assert done["tables"][0]["removed_files"] == len(planned), done
    status = json.loads(cli(config, "landing", "status", "--json").stdout)[0]
    assert status["first_segment"] == last + 1 == status["last_segment"], status
    assert status["merged_segment"] == last and status["oldest_unmerged"], status
    merge()
    verify()
    assert worker.stop() == 0
