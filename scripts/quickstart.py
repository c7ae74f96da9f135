#!/usr/bin/env python3
"""The dblog quickstart: capture two live databases, dump, merge and repair them from Airflow.

Run it through ``./scripts/quickstart`` (which prepares the machine and the venv), or with
the venv's interpreter: ``.venv/bin/python scripts/quickstart.py [--keep] [--source KIND]``.
Every server and process it starts is private to the run (free ports on 127.0.0.1, files in
the run directory or in temporary directories) and stopped at the end, or on Ctrl-C:

1. starts Redis, a PostgreSQL (``wal_level=logical``) and a MariaDB (row-based binary log),
   and, meanwhile, Airflow (scheduler, DAG processor, triggerer, API server; SQLite);
2. creates the shop on each source (customers and orders), a worker configuration per
   source, and starts one ``dblog run`` per source; puts a live write load on both;
3. triggers the ``dblog_dump`` DAG for each source through Airflow's REST API (all tables,
   no merge yet) and follows both runs until they succeed;
4. stops the load, waits until each worker's checkpoint passes its source's log end, and
   replays each landing zone in position order against the source tables;
5. switches ``dblog_merge`` on (its first run merges every table of both sources with Spark
   into the databases ``shop_replica``), follows it, switches it off again; ``dblog verify``;
6. damages each source's ``customers`` target table (a changed row, a deleted one, an extra
   one), triggers ``dblog_repair`` for each, follows the runs; ``dblog verify`` again;
7. prints a summary (the DAG runs, the repaired keys, the tables, timings, where the logs
   are) and stops everything; ``--keep`` leaves it all running until Ctrl-C instead.

Exit status: 0 when every step succeeded, every table converged and verify found every
target table equal to its source; 1 otherwise; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quickstart_airflow import LocalAirflow, RunResult
from quickstart_shop import (
    REPLICA,
    ROOT,
    RUN_MARKER,
    Child,
    Failed,
    MariaDBShop,
    PostgresShop,
    Shop,
    ShopLoad,
    TableCheck,
    check_table,
    heading,
    indent,
    leftover_processes,
    number,
    say,
    seconds,
    stop_tree,
    tail,
    write_config,
)

from dblog_worker.state import StateStore
from tests.services import RedisServer, free_port

SHOPS: dict[str, type[Shop]] = {PostgresShop.kind: PostgresShop, MariaDBShop.kind: MariaDBShop}
DAGS = ("dblog_dump", "dblog_merge", "dblog_repair", "dblog_backfill")
EXTRA_KEY = 90_000_001  # the key of the row added to each target: the source never has it
SPARK_MASTER = "local[2]"


@dataclass
class Options:
    keep: bool
    workdir: Path | None
    sources: list[str]
    customers: int
    orders: int
    chunk_size: int
    warmup_s: float
    seed: int
    airflow_port: int | None


def parse_args(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        description="The dblog quickstart: live PostgreSQL and MariaDB sources, a worker "
        "each, and Airflow running the dump, merge and repair DAGs on them.")
    parser.add_argument("--keep", action="store_true",
                        help="leave everything running (Airflow's UI, the workers, the "
                        "databases) until Ctrl-C, and print how to reach it")
    parser.add_argument("--source", choices=[*SHOPS, "both"], default="both",
                        help="the source databases (default: %(default)s)")
    parser.add_argument("--workdir", type=Path,
                        help="the run directory: configurations, landing zone, Airflow's "
                        "home, logs (default: a new dblog-quickstart-* in the temp dir)")
    parser.add_argument("--customers", type=int, default=20_000, help="rows of customers")
    parser.add_argument("--orders", type=int, default=100_000, help="rows of orders")
    parser.add_argument("--chunk-size", type=int, default=2_000, help="rows per dump chunk")
    parser.add_argument("--warmup-s", type=float, default=3.0,
                        help="seconds of live writes before the dumps are triggered")
    parser.add_argument("--seed", type=int, default=7, help="seed of the write load")
    parser.add_argument("--airflow-port", type=int,
                        help="the port of Airflow's UI and API on 127.0.0.1 (default: a free "
                        "one)")
    args = parser.parse_args(argv)
    if args.customers < 10 or args.orders < 10:
        parser.error("--customers and --orders need at least 10 rows")
    if not 1 <= args.chunk_size <= 100_000:
        parser.error("--chunk-size must be from 1 to 100000")
    sources = list(SHOPS) if args.source == "both" else [args.source]
    return Options(args.keep, args.workdir, sources, args.customers, args.orders,
                   args.chunk_size, args.warmup_s, args.seed, args.airflow_port)


# -- one source: its shop, worker and results --------------------------------------------------


@dataclass
class Capture:
    """One source database with its worker, its connection in Airflow, and what happened."""

    shop: Shop
    config: Path
    logs: Path
    redis_url: str
    worker: Child | None = None
    state: StateStore | None = None
    load: ShopLoad | None = None
    http: str = ""
    checks: list[TableCheck] = field(default_factory=list)
    verify_after_merge: dict[str, Any] = field(default_factory=dict)
    corrupted: dict[str, list[int]] = field(default_factory=dict)  # kind -> keys
    found: dict[str, list[list[str]]] = field(default_factory=dict)  # what verify found
    verify_final: dict[str, Any] = field(default_factory=dict)
    runs: list[RunResult] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # run id -> what it did

    @property
    def source(self) -> str:
        return self.shop.source

    @property
    def conn_id(self) -> str:
        return f"dblog_{self.source}"

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, DBLOG_CONFIG=str(self.config), PYTHONUNBUFFERED="1")

    def connection(self) -> str:
        """The Airflow connection (type dblog) to this worker, as JSON."""
        host_port = self.redis_url.split("//", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        return json.dumps({"conn_type": "dblog", "host": host, "port": int(port),
                           "schema": "0",
                           "extra": {"source": self.source, "config": str(self.config)}})

    def dblog(self, *args: str, show: bool = True, check: bool = True,
              timeout: float = 300) -> str:
        """Run ``dblog ARGS`` on this source's configuration; print it and its output."""
        if show:
            say(f"$ DBLOG_CONFIG={self.config.name} dblog {shlex.join(args)}")
        done = subprocess.run([sys.executable, "-m", "dblog_worker", *args], env=self.env,
                              cwd=ROOT, timeout=timeout, capture_output=True, text=True,
                              check=False)
        if show and (done.stdout or done.stderr):
            say(indent(done.stdout + done.stderr))
        if check and done.returncode != 0:
            raise Failed(f"`dblog {shlex.join(args)}` ({self.source}) exited with "
                         f"{done.returncode}: {done.stderr.strip()[-2000:]}"
                         + (tail(self.worker.log) if self.worker else ""))
        return done.stdout

    def start_worker(self) -> None:
        self.worker = Child(f"the worker of {self.source}",
                            [sys.executable, "-m", "dblog_worker", "run", "--log-level", "INFO"],
                            self.logs / f"worker-{self.source}.log", self.env)
        self.state = StateStore(self.redis_url, self.source)

    def check(self) -> None:
        if self.worker is not None:
            self.worker.check()

    def wait_ready(self, timeout: float = 90) -> None:
        """Wait until the worker reports a status and a checkpoint."""
        assert self.state is not None and self.worker is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            status = self.state.status()
            if status and self.state.checkpoint() is not None:
                self.http = status.get("http", "")
                return
            time.sleep(0.2)
        raise Failed(f"the worker of {self.source} did not report within {timeout:.0f} s"
                     + tail(self.worker.log))

    def wait_drained(self, timeout: float = 120) -> str:
        """Wait until the saved checkpoint passes the source's log position of now."""
        assert self.state is not None and self.worker is not None
        target, end = self.shop.log_end()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            saved = self.state.checkpoint()
            if saved is not None and self.shop.checkpoint_position(saved) >= end:
                return target
            time.sleep(0.1)
        raise Failed(f"the checkpoint of {self.source} did not reach {target} within "
                     f"{timeout:.0f} s" + tail(self.worker.log))

    def verify(self, *tables: str) -> dict[str, Any]:
        """``dblog verify --json``: the target tables against the source."""
        args = ["verify", "--json"]
        for table in tables:
            args += ["--table", table]
        output = self.dblog(*args, show=False, check=False)
        try:
            return dict(json.loads(output))
        except ValueError:
            raise Failed(f"dblog verify ({self.source}) printed no result: {output[-2000:]}"
                         ) from None


def say_verify(capture: Capture, result: dict[str, Any]) -> None:
    for table in result["tables"]:
        differences = [f"{len(table[kind])} {kind} ({_keys(table[kind])})"
                       for kind in ("missing", "changed", "extra") if table[kind]]
        target = capture.shop.target_label(table["target_table"])
        say(f"   {capture.source}  {table['table']} -> {target}: "
            f"{number(table['source_rows'] or 0)} rows, {table['ranges']} ranges: "
            + ("EQUAL" if table["equal"] else "DIFFERENT: " + (
                ", ".join(differences) or str(table.get("error")))))


def _keys(keys: Sequence[Sequence[object]]) -> str:
    """``10, 11`` for one-column keys, ``[7, "EU"]`` for composite ones."""
    return ", ".join(str(k[0]) if len(k) == 1 else json.dumps(list(k)) for k in keys[:10])


# -- the quickstart ------------------------------------------------------------------------


@dataclass
class Timings:
    started: float = field(default_factory=time.monotonic)
    steps: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        begun = time.monotonic()
        try:
            yield
        finally:
            self.steps[name] = time.monotonic() - begun

    def total(self) -> float:
        return time.monotonic() - self.started


class Quickstart:
    """The story, step by step; :meth:`run` starts and stops everything."""

    def __init__(self, options: Options, run_dir: Path) -> None:
        self.options = options
        self.run_dir = run_dir
        self.logs = run_dir / "logs"
        self.landing = run_dir / "landing"
        self.captures: list[Capture] = []
        self.airflow: LocalAirflow | None = None
        self.redis: RedisServer | None = None
        self.timings = Timings()
        self.merge_run: RunResult | None = None

    # -- start and stop -----------------------------------------------------------------------

    def run(self, stack: contextlib.ExitStack) -> int:
        """Start everything (each part registers its own stop on ``stack``), run the story."""
        options = self.options
        venv_bin = Path(sys.executable).parent
        missing = [name for name in ("airflow", "spark-submit") if not (venv_bin / name).exists()]
        if missing:
            raise Failed(f"{' and '.join(missing)} not found beside {sys.executable}: run "
                         "./scripts/quickstart, which creates .venv with pip install -e "
                         "'.[test]', or run this file with that venv's python")
        self.logs.mkdir(parents=True, exist_ok=True)
        heading("starting private servers and Airflow (free ports on 127.0.0.1)")
        say(f"   run directory {self.run_dir}")
        with self.timings.step("servers"):
            port = options.airflow_port or free_port()
            self.airflow = LocalAirflow(self.run_dir / "airflow", self.logs, port,
                                        self._airflow_env(port))
            stack.callback(self.airflow.stop)
            self.airflow.begin()
            self.redis = stack.enter_context(RedisServer().start())
            stack.callback(self._keep_log, self.redis.log_path, "redis.log")
            say(f"   Redis on port {self.redis.port}")
            for kind in options.sources:
                shop = stack.enter_context(SHOPS[kind].started())
                stack.callback(self._keep_log, shop.server_log, f"{kind}.log")
                say(f"   {shop.describe()} ({shop.server_note}), source {shop.source}")
                self.captures.append(Capture(shop, self.run_dir / f"{shop.source}.toml",
                                             self.logs, self.redis.url))
            self._connect_airflow()
            self.airflow.start()
            say(f"   Airflow {airflow_version()}: scheduler, DAG processor, triggerer, API "
                f"server on {self.airflow.url} (starting; logs in {self.logs})")

        heading(f"creating the shops: {number(options.customers)} customers, "
                f"{number(options.orders)} orders each")
        with self.timings.step("shops"):
            for capture in self.captures:
                capture.shop.create_shop(options.customers, options.orders)
                write_config(capture.config, capture.shop, capture.redis_url, self.landing)
                say(f"   {capture.source}: {', '.join(capture.shop.tables)} "
                    f"({capture.shop.shop_note}); configuration {capture.config}")

        heading("starting a worker per source: dblog preflight, dblog run")
        with self.timings.step("workers"):
            for capture in self.captures:
                capture.dblog("preflight")
                capture.start_worker()
                stack.callback(self._stop_worker, capture)
            for capture in self.captures:
                capture.wait_ready()
                assert capture.state is not None
                log = capture.worker.log if capture.worker else ""
                say(f"   {capture.source}: "
                    f"{capture.shop.streaming(capture.state.checkpoint() or '')}; HTTP API "
                    f"{capture.http or '(off)'}; log {log}")

        return self.story(stack)

    def _airflow_env(self, port: int) -> dict[str, str]:
        home = self.run_dir / "airflow"
        venv_bin = str(Path(sys.executable).parent)
        env = dict(os.environ)
        env.update(LocalAirflow.settings(home, port, (free_port(), free_port())))
        sources = [SHOPS[k] for k in self.options.sources]
        conn_ids = [f"dblog_{s.source}" for s in sources]
        env.update({
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),  # airflow, spark-submit
            "PYTHONPATH": os.pathsep.join([str(ROOT / "dags"), *filter(None, [
                env.get("PYTHONPATH")])]),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYTHONUNBUFFERED": "1",
            # The DAGs' settings, the provider's [dblog] section
            # (docs/airflow.md#settings-of-the-dag-files).
            "AIRFLOW__DBLOG__CONN_ID": conn_ids[0],
            "AIRFLOW__DBLOG__CONFIG": str(self.run_dir / f"{sources[0].source}.toml"),
            "AIRFLOW__DBLOG__MERGE_CONNECTIONS": ",".join(conn_ids),
            "AIRFLOW__DBLOG__POLL_INTERVAL_S": "2",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark",
                                                      "host": SPARK_MASTER}),
        })
        return env

    def _connect_airflow(self) -> None:
        """The dblog connections go into Airflow's environment once Redis has a port."""
        assert self.airflow is not None
        for capture in self.captures:
            self.airflow.env[f"AIRFLOW_CONN_{capture.conn_id.upper()}"] = capture.connection()

    def _keep_log(self, path: Path, name: str) -> None:
        """Copy a server's log into the run directory before the server removes it."""
        with contextlib.suppress(OSError):
            shutil.copyfile(path, self.logs / name)

    def _stop_worker(self, capture: Capture) -> None:
        if capture.worker is not None:
            code = capture.worker.stop(30)
            if code not in (0, None):
                say(f"   the worker of {capture.source} exited with {code}"
                    + tail(capture.worker.log, 10))
        if capture.state is not None:
            capture.state.close()

    @staticmethod
    def _stop_load(capture: Capture) -> None:
        if capture.load is not None and capture.load.is_alive():
            capture.load.stop_event.set()
            capture.load.join(30)

    def check(self) -> None:
        """Fail when a worker exited."""
        for capture in self.captures:
            capture.check()

    # -- the story ----------------------------------------------------------------------------

    def story(self, stack: contextlib.ExitStack) -> int:
        airflow = self.airflow
        assert airflow is not None
        heading("waiting for Airflow: components healthy, DAGs parsed, admin login")
        with self.timings.step("airflow"):
            airflow.wait_ready(DAGS, timeout=420, check=self.check)
            airflow.login()
        say(f"   ready {seconds(self.timings.total())} after the start: UI {airflow.url}/ "
            f"(user admin, password in {airflow.password_file})")

        options = self.options
        heading(f"starting the live write load on every source ({options.warmup_s:.0f} s "
                "before the dumps)")
        for capture in self.captures:
            capture.load = ShopLoad(capture.shop, options.customers, options.orders,
                                    options.seed)
            capture.load.start()
            stack.callback(self._stop_load, capture)
        time.sleep(options.warmup_s)
        say("   " + ", ".join(f"{c.source}: {number(c.load.stats.transactions)} transactions"
                              for c in self.captures if c.load))

        self.dumps()
        self.drain_and_replay()
        self.merge()
        self.repair()

        heading("verifying every target table against its source: dblog verify")
        with self.timings.step("verify"):
            for capture in self.captures:
                capture.verify_final = capture.verify()
                say_verify(capture, capture.verify_final)
        ok = self.summary()
        if self.options.keep:
            self.keep_running()
        return 0 if ok else 1

    def dumps(self) -> None:
        airflow = self.airflow
        assert airflow is not None
        heading("dumping every table under the load: the dblog_dump DAG, one run per source")
        say(f"   PATCH {airflow.url}/api/v2/dags/dblog_dump  is_paused=false  (the switch in "
            "the UI)")
        with self.timings.step("dumps"):
            airflow.set_paused("dblog_dump", False)
            runs = []
            for capture in self.captures:
                conf: dict[str, Any] = {
                    "conn_id": capture.conn_id, "scope": "all", "tables": [], "keys": None,
                    "chunk_size": self.options.chunk_size, "delay_ms": 0,
                    "merge": False, "verify": False}
                run = RunResult(capture.source, "dblog_dump", f"quickstart-dump-{capture.source}")
                say(f"   POST {airflow.url}/api/v2/dags/dblog_dump/dagRuns  "
                    f"conf={json.dumps(conf)}")
                airflow.trigger(run.dag_id, run.run_id, conf)
                capture.runs.append(run)
                runs.append((capture, run))
            airflow.follow([r for _, r in runs], timeout=900, check=self.check)
        for capture, run in runs:
            assert capture.state is not None
            request_id = str(airflow.xcom(run.dag_id, run.run_id, "submit"))
            progress = capture.state.progress(request_id)
            rows = sum(p.rows for p in progress.values())
            windows = sum(p.chunks for p in progress.values())
            dropped = sum(p.dropped for p in progress.values())
            capture.notes[run.run_id] = (
                f"{request_id}: {len(progress)} tables, {number(rows)} rows in {windows} "
                f"windows, {number(dropped)} rows dropped for newer log events")
            say(f"   {capture.source}: {capture.notes[run.run_id]}")

    def drain_and_replay(self) -> None:
        heading("stopping the load; waiting for each worker to drain its log; replaying the "
                "landing zone")
        with self.timings.step("drain and replay"):
            for capture in self.captures:
                assert capture.load is not None
                capture.load.stop()
                stats = capture.load.stats
                target = capture.wait_drained()
                say(f"   {capture.source}: {number(stats.transactions)} transactions, "
                    f"{number(sum(stats.statements.values()))} row writes; checkpoint has "
                    f"reached the source's {capture.shop.log_name} {target}")
            for capture in self.captures:
                for table in capture.shop.tables:
                    check = check_table(capture.shop, self.landing, table)
                    capture.checks.append(check)
                    say(f"   {capture.source}  {table}: {number(check.source)} source rows, "
                        f"{number(check.output)} rows replayed from "
                        f"{number(check.replayed.events)} events: "
                        + ("converged" if check.converged else "DIFFERENT"))

    def merge(self) -> None:
        airflow = self.airflow
        assert airflow is not None
        heading("merging both landing zones into the targets with Spark: the dblog_merge DAG")
        say("   switching dblog_merge on: its first run starts at once (then every 15 minutes)")
        with self.timings.step("merge"):
            airflow.set_paused("dblog_merge", False)
            deadline = time.monotonic() + 180
            runs: list[dict[str, Any]] = []
            while not runs:
                self.check()
                airflow.check()
                runs = airflow.runs("dblog_merge")
                if time.monotonic() > deadline:
                    raise Failed("switched on, dblog_merge started no run within 180 s"
                                 + tail(airflow.children["scheduler"].log, 20))
                time.sleep(1.0)
            run = RunResult("merge", "dblog_merge", str(runs[0]["dag_run_id"]))
            self.merge_run = run
            try:
                airflow.follow([run], timeout=900, check=self.check)
            finally:
                # Off again: its next run must not meet the repairs' merges.
                airflow.set_paused("dblog_merge", True)
            say("   dblog_merge switched off again")
        heading("verifying the merged tables: dblog verify")
        for capture in self.captures:
            capture.verify_after_merge = capture.verify()
            say_verify(capture, capture.verify_after_merge)

    def repair(self) -> None:
        airflow = self.airflow
        assert airflow is not None
        heading(f"damaging the customers of each {REPLICA}: a changed row, a deleted one, "
                "an extra one")
        for capture in self.captures:
            table = capture.shop.customers
            changed, deleted, copied = capture.shop.first_keys(table, 3)
            capture.shop.corrupt_target(table, changed, deleted, copied, EXTRA_KEY)
            capture.corrupted = {"changed": [changed], "missing": [deleted],
                                 "extra": [EXTRA_KEY]}
            say(f"   {capture.source}  {table}: name of {changed} changed, {deleted} deleted, "
                f"{EXTRA_KEY} added (a copy of {copied})")
            found = capture.verify(table)
            say_verify(capture, found)
            entry = found["tables"][0]
            capture.found = {kind: entry[kind] for kind in ("missing", "changed", "extra")}

        heading("repairing them: the dblog_repair DAG, one run per source")
        say("   (one run at a time: the second waits for the first)")
        with self.timings.step("repairs"):
            airflow.set_paused("dblog_repair", False)
            runs = []
            for capture in self.captures:
                conf: dict[str, Any] = {"conn_id": capture.conn_id,
                                        "table": capture.shop.customers,
                                        "chunk_size": 5000, "delay_ms": 0}
                run = RunResult(capture.source, "dblog_repair",
                                f"quickstart-repair-{capture.source}")
                say(f"   POST {airflow.url}/api/v2/dags/dblog_repair/dagRuns  "
                    f"conf={json.dumps(conf)}")
                airflow.trigger(run.dag_id, run.run_id, conf)
                capture.runs.append(run)
                runs.append((capture, run))
            airflow.follow([r for _, r in runs], timeout=1200, check=self.check)
        for capture, run in runs:
            compare = airflow.xcom(run.dag_id, run.run_id, "compare") or {}
            request_id = airflow.xcom(run.dag_id, run.run_id, "submit")
            removed = (airflow.xcom(run.dag_id, run.run_id, "remove_extra") or {}).get(
                "removed", [])
            verified = (airflow.xcom(run.dag_id, run.run_id, "verify") or {}).get("equal")
            keys = _repaired_keys(compare)
            capture.notes[run.run_id] = (
                f"{capture.shop.customers}: {request_id} dumped keys "
                f"{', '.join(map(str, keys))}; removed extra {_keys(removed) or 'none'}; "
                f"verify {'equal' if verified else 'DIFFERENT'}")
            say(f"   {capture.source}: {capture.notes[run.run_id]}")

    # -- the end --------------------------------------------------------------------------------

    def summary(self) -> bool:
        airflow = self.airflow
        assert airflow is not None
        heading("summary")
        runs = [r for c in self.captures for r in c.runs if r.dag_id == "dblog_dump"]
        if self.merge_run:
            runs.append(self.merge_run)
        runs += [r for c in self.captures for r in c.runs if r.dag_id == "dblog_repair"]
        notes = {k: v for c in self.captures for k, v in c.notes.items()}
        if self.merge_run:
            notes[self.merge_run.run_id] = ", ".join(
                f"{t} {s}" for t, s in self.merge_run.tasks.items())
        say("   DAG runs, triggered and followed through Airflow's REST API:")
        width = max(len(r.run_id) for r in runs)
        for run in runs:
            say(f"     {run.dag_id:<12}  {run.run_id:<{width}}  {run.state:<7}  "
                f"{seconds(run.duration):>10}  {notes.get(run.run_id, '')}")
        say("")
        say("   repaired keys (damaged in the target, found by dblog verify, repaired by "
            "dblog_repair):")
        repaired_ok = True
        for capture in self.captures:
            final = {t["table"]: t for t in capture.verify_final["tables"]}
            entry = final.get(capture.shop.customers, {})
            expected = {k: [[str(v)] for v in keys] for k, keys in capture.corrupted.items()}
            found = {k: [[str(v) for v in key] for key in keys]
                     for k, keys in capture.found.items()}
            found_all = found == expected
            equal = bool(entry.get("equal"))
            repaired_ok &= found_all and equal
            say(f"     {capture.source:<13} {capture.shop.customers}: "
                + ", ".join(f"{kind} {_keys(capture.found.get(kind, []))}"
                            for kind in ("changed", "missing", "extra"))
                + (": EQUAL after the repair" if equal else ": still DIFFERENT")
                + ("" if found_all else f" (damaged {capture.corrupted})"))
        say("")
        header = ("SOURCE", "TABLE", "SOURCE ROWS", "REPLAYED", "LOG EVENTS", "DUMP ROWS",
                  "LANDING ZONE", "TARGET")
        rows = [header]
        converged = True
        verified = True
        for capture in self.captures:
            final = {t["table"]: t for t in capture.verify_final["tables"]}
            verified &= bool(capture.verify_final.get("equal"))
            for check in capture.checks:
                converged &= check.converged
                rows.append((
                    capture.source, check.table, number(check.source), number(check.output),
                    number(check.replayed.log_events),
                    number(sum(check.replayed.dump_rows.values())),
                    "converged" if check.converged else "DIFFERENT",
                    "EQUAL" if final.get(check.table, {}).get("equal") else "DIFFERENT"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for r in rows:
            say("   " + "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                                  for i, (cell, w) in enumerate(zip(r, widths, strict=True))))
        if all(not c.replayed.time_travel for cap in self.captures for c in cap.checks):
            say("   no time travel: along each landing zone, every key's version only grows")
        say("")
        steps = ", ".join(f"{name} {seconds(value)}" for name, value in
                          self.timings.steps.items())
        say(f"   timings        {steps}; total {seconds(self.timings.total())}")
        say(f"   Airflow        {airflow.url}/  (user admin, password in "
            f"{airflow.password_file})")
        for capture in self.captures:
            say(f"   {capture.source:<14} worker HTTP API {capture.http or '(off)'}, "
                f"configuration {capture.config}")
        say(f"   logs           {self.logs}  (workers, Airflow's components, servers)")
        say(f"   task logs      {airflow.home / 'logs'}")
        say(f"   landing zone   {self.landing}")
        ok = (converged and verified and repaired_ok
              and all(r.succeeded for r in runs))
        if ok:
            say("\nRESULT: converged: every DAG run succeeded, each landing zone replays to "
                "its source tables, and `dblog verify` finds every target table EQUAL to its "
                "source, the damaged ones after their repair")
        else:
            say("\nRESULT: NOT converged"
                + ("" if converged else " (a landing zone differs from its source)")
                + ("" if verified else " (dblog verify found differences)")
                + ("" if repaired_ok else " (a repair did not find or fix the damaged keys)"))
        return ok

    def keep_running(self) -> None:
        airflow = self.airflow
        assert airflow is not None and self.redis is not None
        heading("still running (--keep); Ctrl-C stops everything")
        say(f"   Airflow UI   {airflow.url}/   user admin, password {airflow.password()}")
        say(f"   REST API     curl -s -X POST {airflow.url}/auth/token -H 'Content-Type: "
            "application/json' -d '{\"username\": \"admin\", \"password\": \"...\"}'")
        for capture in self.captures:
            say(f"   {capture.source:<12} worker HTTP API {capture.http or '(off)'}, log "
                f"{capture.worker.log if capture.worker else ''}")
            say(f"   {'':<12} {capture.shop.label}: {capture.shop.client()}")
            say(f"   {'':<12} target:  {capture.shop.client(database=REPLICA)}")
        say(f"   Redis        redis-cli -p {self.redis.port} --scan --pattern 'dblog:v1:*'")
        say(f"   logs         {self.logs}")
        first = self.captures[0]
        say("")
        say("   Try, in another terminal:")
        say(f"     export DBLOG_CONFIG={shlex.quote(str(first.config))} "
            f"PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH")
        say("     dblog status; dblog list")
        say(f"     {first.shop.client(database=REPLICA, sql=_damage_sql(first.shop))}")
        say(f"     then in the UI: dblog_repair → Trigger, Source {first.conn_id}, Table "
            f"{first.shop.customers}")
        say("     or dblog_dump → Trigger: What to dump Keys, Tables "
            f"{first.shop.customers}, Keys [1, 2, 3]")
        say("")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                self.check()
                airflow.check()
                time.sleep(1.0)
        say("")


def _repaired_keys(compare: dict[str, Any]) -> list[object]:
    """The keys the repair's compare task chose to dump: its dump spec's (a one-column key
    as its value)."""
    keys = json.loads(compare.get("spec") or "{}").get("keys") or []
    return [k[0] if isinstance(k, list) and len(k) == 1 else k for k in keys]


def _damage_sql(shop: Shop) -> str:
    table = shop.customers if shop.kind == "postgresql" else shop.customers.split(".")[1]
    return f"UPDATE {table} SET name = 'x' WHERE id = 10"


def airflow_version() -> str:
    with contextlib.suppress(Exception):
        from importlib.metadata import version
        return version("apache-airflow")
    return "?"


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    run_dir = (options.workdir or Path(tempfile.mkdtemp(prefix="dblog-quickstart-"))).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in ("landing", "airflow", "logs"):  # a --workdir used before
        shutil.rmtree(run_dir / old, ignore_errors=True)
    run_id = uuid.uuid4().hex
    os.environ[RUN_MARKER] = run_id  # inherited by every process started from here on
    # SIGINT (also when started in the background) and SIGTERM are a Ctrl-C: what was
    # started is stopped below, in reverse order.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    quickstart = Quickstart(options, run_dir)
    stack = contextlib.ExitStack()
    code = 1
    try:
        code = quickstart.run(stack)
    except Failed as exc:
        say(f"\nRESULT: FAILED: {exc}")
    except KeyboardInterrupt:
        say("\ninterrupted")
        code = 130
    except Exception as exc:  # a bug, or a server that did not start: say where to look
        traceback.print_exc(file=sys.stdout)
        say(f"\nRESULT: FAILED: {exc!r}")
    finally:
        # A second Ctrl-C must not leave half of it running.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        heading("stopping everything the quickstart started")
        stopping = time.monotonic()
        try:
            stack.close()
        except Exception as exc:
            say(f"   stopping failed: {exc!r}")
            code = code or 1
        left = leftover_processes(run_id)
        if left:
            say(f"   {len(left)} process(es) of this run were left; stopping them")
            stop_tree(left, timeout=10)
        say(f"   stopped in {seconds(time.monotonic() - stopping)}")
    if code not in (0, 130):
        say(f"\nthe logs, last lines of each (all of them in {quickstart.logs}; Airflow's "
            f"task logs in {run_dir / 'airflow' / 'logs'}):")
        for path in sorted(quickstart.logs.glob("*.log")):
            say(tail(path, 15))
    return code


if __name__ == "__main__":
    sys.exit(main())
