"""dblog: run the capture worker, check a source, and create and steer dumps.

Every command reads the worker's configuration file (``--config``, or the
``DBLOG_CONFIG`` environment variable). Requests go to Redis; the running worker
picks them up. Exit status: 0 success; 1 the thing asked about failed (a problem
found, a dump failed, a terminal error); 2 the command was refused (bad input, an
unknown request, a state that does not allow it, a configuration file that cannot be
used); 3 a service was unreachable (Redis, the source database: try again); 130
interrupted.
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import cast

from dblog_worker import __version__, cli_dumps
from dblog_worker import config as config_module
from dblog_worker.config import Config
from dblog_worker.dialect import dialect, open_source
from dblog_worker.dump.requests import (
    COMMANDS,
    DEFAULT_CHUNK_SIZE,
    MAX_CHUNK_SIZE,
    MAX_DELAY_MS,
    MAX_KEYS,
    MAX_PARALLELISM,
    Priority,
)
from dblog_worker.dump.row_filter import key_argument
from dblog_worker.dump.throttle import LIMITS
from dblog_worker.errors import (
    ConfigInvalid,
    CorruptState,
    DblogError,
    RequestRejected,
    TerminalError,
    TransientError,
)
from dblog_worker.source import Source


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.config is None:
            raise ConfigInvalid("no configuration file: give --config FILE, or set the "
                                "environment variable $DBLOG_CONFIG to its path")
        config = config_module.load(args.config)
        result: int = args.handler(config, args)
        return result
    except RequestRejected as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    except ConfigInvalid as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TransientError as exc:  # a driver's message may span lines
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 3
    except DblogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, TerminalError) else 3
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dblog", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--version", action="version", version=f"dblog {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(name: str, handler: object, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--config", "-c", default=os.environ.get("DBLOG_CONFIG") or None,
                         metavar="FILE",
                         help="the worker's configuration file (default: $DBLOG_CONFIG; "
                              "one of them is needed)")
        sub.set_defaults(handler=handler)
        return sub

    run = command("run", _run, "run the capture worker")
    run.add_argument("--adopt-slot", action="store_true",
                     help="Redis lost its state: continue from the existing slot (PostgreSQL) "
                          "or the end of the binary log (MySQL); then request a full dump")
    run.add_argument("--log-format", choices=["text", "json"],
                     help="text or json (default: logging.format, text)")
    run.add_argument("--log-level", type=str.lower,
                     choices=["debug", "info", "warning", "error"],
                     help="default: logging.level, info")

    command("preflight", _preflight, "check the source's settings; print the fixes")

    dump = command("dump", cli_dumps.dump, "request a dump: all tables, some tables, or some keys")
    scope = dump.add_mutually_exclusive_group(required=True)
    scope.add_argument("--all", action="store_true", help="every captured table")
    scope.add_argument("--table", "-t", action="append", dest="tables", metavar="SCHEMA.TABLE",
                       help="a table to dump (repeat for several)")
    keys = dump.add_mutually_exclusive_group()
    keys.add_argument("--keys", metavar="JSON",
                      help='primary keys as JSON: [1,2] or [[1,"a"],[2,"b"]] (a keys dump of '
                           f"the one table given; at most {MAX_KEYS:,})")
    keys.add_argument("--keys-file", type=Path, metavar="FILE",
                      help="a file with the keys as JSON")
    dump.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, metavar="N",
                      help=f"rows per chunk, keys per batch of a keys dump (default "
                           f"{DEFAULT_CHUNK_SIZE}; 1-{MAX_CHUNK_SIZE:,})")
    dump.add_argument("--delay-ms", type=int, default=0, metavar="MS",
                      help=f"pause between chunks (default 0; 0-{MAX_DELAY_MS:,})")
    dump.add_argument("--parallelism", type=int, default=1, metavar="P",
                      help="chunk SELECTs per window, each on a source connection of its own "
                           f"(default 1: one chunk per window; 1-{MAX_PARALLELISM})")
    dump.add_argument("--where", nargs="+", action="append", metavar="WORD",
                      help="only rows that meet a condition, as COLUMN OP [VALUE...]: "
                           "region = EU, region in EU US, created_at '>=' 2026-01-01, "
                           "deleted_at is null (repeat: all must hold)")
    dump.add_argument("--from-key", type=key_argument, metavar="KEY",
                      help='the first primary key to dump (included): 100 or [1,"a"]')
    dump.add_argument("--to-key", type=key_argument, metavar="KEY",
                      help="the last primary key to dump (included)")
    dump.add_argument("--prune", action="store_true",
                      help="also remove, downstream, the rows the source no longer has: once "
                           "each table is read, its rows no event wrote since the dump began "
                           "are gone (whole tables only)")
    dump.add_argument("--priority", choices=[p.value for p in Priority],
                      help="its share of windows while other dumps run, and its place in the "
                           "queue: urgent (weight 16), normal (4), background (1); default: "
                           "urgent for --keys and --prune, else normal")
    _throttle_options(dump)
    dump.add_argument("--client-token", metavar="TOKEN",
                      help="idempotency token: the same token, one request (default: none)")
    dump.add_argument("--wait", action="store_true", help="show progress until it ends")
    dump.add_argument("--json", action="store_true", help="print the request as JSON")

    listing = command("list", cli_dumps.list_dumps, "list dump requests")
    listing.add_argument("--active", action="store_true", help="only requests not finished")
    listing.add_argument("--json", action="store_true")

    show = command("show", cli_dumps.show, "show one request with its progress")
    show.add_argument("id")
    show.add_argument("--json", action="store_true")

    wait = command("wait", cli_dumps.wait, "show a request's progress until it ends")
    wait.add_argument("id")
    wait.add_argument("--timeout", type=float, default=0, help="give up after seconds (0: never)")

    for name in COMMANDS:
        sub = command(name, cli_dumps.control, f"{name} a dump request")
        sub.add_argument("id")
        sub.set_defaults(command=name)

    knobs = command("set", cli_dumps.set_knobs,
                    "change chunk size, delay, parallelism, throttle limits and/or priority "
                    "of a dump that has not ended")
    knobs.add_argument("id")
    knobs.add_argument("--chunk-size", type=int, metavar="N",
                       help=f"rows per chunk (1-{MAX_CHUNK_SIZE:,}; default: unchanged)")
    knobs.add_argument("--delay-ms", type=int, metavar="MS",
                       help=f"pause between chunks (0-{MAX_DELAY_MS:,}; default: unchanged)")
    knobs.add_argument("--parallelism", type=int, metavar="P",
                       help=f"chunk SELECTs per window (1-{MAX_PARALLELISM}; default: "
                            "unchanged)")
    knobs.add_argument("--priority", choices=[p.value for p in Priority],
                       help="urgent, normal or background: its share of windows from its "
                            "next turn, and its place in the queue (default: unchanged)")
    _throttle_options(knobs)
    knobs.add_argument("--no-throttle", action="store_true",
                       help="turn every throttle limit off")

    status = command("status", _status, "show what the worker is doing")
    status.add_argument("--json", action="store_true")

    merge = command("merge", _merge, "merge the landed events into the target tables (Spark)")
    merge.add_argument("--table", "-t", action="append", dest="tables", default=[],
                       metavar="SCHEMA.TABLE", help="merge only this source table (repeat)")
    merge.add_argument("--master", help="Spark master URL (default: merge.master, local[*])")
    merge.add_argument("--print-command", action="store_true",
                       help="print the spark-submit line instead of running it")
    merge.add_argument("--json", action="store_true", help="print the job's report as JSON")

    verify = command("verify", _verify, "compare source tables with their merged targets; "
                     "print the keys that differ")
    verify.add_argument("--table", "-t", action="append", dest="tables", metavar="SCHEMA.TABLE",
                        help="a table to compare (repeat for several; default: all captured)")
    verify.add_argument("--range-rows", type=int, default=10_000, metavar="N",
                        help="source rows per compared key range (default 10,000; "
                             "2-1,000,000)")
    verify.add_argument("--delay-ms", type=int, default=0, metavar="MS",
                        help="pause between ranges (default 0; 0-3,600,000)")
    verify.add_argument("--recheck", type=float, default=0.0, metavar="SECONDS",
                        help="then wait SECONDS and compare the differing keys again "
                             "(default 0: no; 0-3600)")
    verify.add_argument("--keys-out", metavar="FILE",
                        help="write the differing keys for `dblog dump --keys-file` "
                             "({table} in FILE: one file per table)")
    verify.add_argument("--json", action="store_true")

    landing = command("landing", _landing,
                      "the landing zone's files: status, compact small segments, remove "
                      "merged ones (retention)")
    landing.add_argument("action", choices=["status", "compact", "retain", "maintain"],
                         help="status: files, bytes, oldest unmerged position per table; "
                              "compact: small segments into large ones; retain: remove "
                              "segments every target merged, past landing.retention; "
                              "maintain: both")
    landing.add_argument("--table", "-t", action="append", dest="tables", default=[],
                         metavar="SCHEMA.TABLE", help="only this table (repeat)")
    landing.add_argument("--dry-run", action="store_true",
                         help="list what would be written and removed; change nothing")
    landing.add_argument("--json", action="store_true")

    reset = command("reset", _reset, "forget the checkpoint, to start capture anew")
    reset.add_argument("--yes", action="store_true", help="really do it")
    reset.add_argument("--force", action="store_true",
                       help="even if a worker reported in the last minute")
    return parser


# -- commands -------------------------------------------------------------------


class _NoPandas(importlib.abc.MetaPathFinder):
    """pyarrow imports pandas, where it is installed, at its first ``pa.array`` of a list,
    only to ask whether the list is a pandas object: about 30 MB of memory and 0.3 s of
    start-up that the worker never uses. In the worker's process pandas is not found
    (pyarrow then goes without it)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> None:
        if fullname.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"the dblog worker does not load {fullname}",
                                      name=fullname)


def without_pandas() -> None:
    """From now on, this process does not import pandas (unless it already has: then
    nothing changes)."""
    if "pandas" not in sys.modules and not any(
            isinstance(finder, _NoPandas) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


def _run(config: Config, args: argparse.Namespace) -> int:
    without_pandas()
    from dblog_worker.capture.worker import Worker
    from dblog_worker.http.server import ControlServer
    from dblog_worker.logs import setup_logging

    setup_logging(args.log_format or config.logs.format, args.log_level or config.logs.level,
                  config.source.name)
    Worker(config, adopt_slot=args.adopt_slot, config_path=Path(args.config),
           serve=lambda *parts: ControlServer(*parts).start()).run_forever()
    return 0


def _preflight(config: Config, args: argparse.Namespace) -> int:
    source = open_source(config.source, lambda table, schema: 0)
    source.connect()
    try:
        problems = source.preflight()
        modes = source.modes()
        cascades = source.cascades()
        selection = source.selection()
        masked = _masked(config, source, selection.existing)
    finally:
        source.close()
    stopping = [p for p in problems if not p.warning]  # all but a pattern's tables
    if not stopping:
        print(f"source {config.source.name} ({config.source.safe_dsn()}) is ready: "
              f"{len(selection.existing)} table(s)")
    else:
        print(f"source {config.source.name}: {len(stopping)} problem(s)")
    for problem in problems:
        warning = "warning: " if problem.warning else ""
        print(f"- {warning}{problem.what}\n  fix: {problem.fix}")
    print("tables:")
    for table, why in selection.captured.items():
        print(f"  captured {table}: {why}")
    for table, why in selection.excluded.items():
        print(f"  left out {table}: {why}")
    if config.source.columns:
        rules = config.source.columns
        print("columns ([source.columns]"
              + (f"; the HMAC key from ${rules.key_env}" if rules.key_env else "") + "):")
        for table, columns in masked.items():
            done = ", ".join(f"{c} {how}" for c, how in columns.items())
            print(f"  {table}: {done or 'no column matches its rules'}")
    print("modes:")
    for line in modes:
        print(f"  {line}")
    print("foreign-key cascades:")
    for line in cascades:
        print(f"  {line}")
    return 1 if stopping else 0


def _masked(config: Config, source: Source, tables: Sequence[str]
            ) -> dict[str, dict[str, str]]:
    """For ``dblog preflight``: what ``[source.columns]`` does to each captured table its
    rules reach, or why it cannot say."""
    found: dict[str, dict[str, str]] = {}
    for table in tables:
        if config.source.columns.reaches(table):
            try:
                found[table] = source.tables.masked_columns(table)
            except DblogError as exc:
                found[table] = {"(not read)": str(exc)}
    return found


def _merge(config: Config, args: argparse.Namespace) -> int:
    import shlex
    import tempfile

    from dblog_worker.merge.submit import (
        merge_job,
        run_merge,
        submit_command,
        write_properties,
    )

    if args.print_command:
        merge_job(config, Path(args.config), args.master or config.merge.master,
                  tables=args.tables)  # refuses a bad table name before a file is written
        properties = None
        if config.merge.spark_conf:  # its values stay off the line: in a file of the user's
            folder = Path(tempfile.mkdtemp(prefix="dblog-merge-"))
            properties = write_properties(folder, config.merge.spark_conf)
            print(f"{properties} holds merge.spark_conf (readable by you only): the line "
                  "needs it; delete its folder when done", file=sys.stderr)
        command = submit_command(config, Path(args.config), tables=args.tables,
                                 master=args.master, as_json=args.json,
                                 properties_file=properties)
        print(shlex.join(command))
        return 0
    return run_merge(config, Path(args.config), tables=args.tables, master=args.master,
                     as_json=args.json)


def _status(config: Config, args: argparse.Namespace) -> int:
    state = cli_dumps.state_of(config)
    status = state.status()
    lease, members = state.lease(), state.members()
    try:
        checkpoint, malformed = state.checkpoint(), None
    except CorruptState as exc:  # shown; the worker stops on it with the same message
        checkpoint, malformed = None, str(exc)
    from dblog_worker.capture.follower import dumped_since, needs_dump, status_lines

    captured, excluded = state.captured(), state.excluded()
    dumped = dumped_since(state.list_records())
    document = {"source": config.source.name, "checkpoint": checkpoint,
                "checkpoint_error": malformed, "worker": status, "lease": lease,
                "members": members,
                "tables": {"captured": {t: {**e, "needs_dump": needs_dump(t, e, dumped)}
                                        for t, e in captured.items()},
                           "excluded": excluded}}
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(f"source {config.source.name}: checkpoint {checkpoint or '-'}")
    if malformed is not None:
        print(f"  checkpoint is malformed: {malformed}")
    if lease:
        print(f"lease: held by {lease.get('holder')} (token {lease.get('token')})")
    else:
        print("lease: free (no worker leads; a standby takes it within its poll interval)")
    for member in members:
        print(f"  {member.get('role', '?'):8} {member['holder']}  http {member.get('http') or '-'}"
              f"  seen {cli_dumps.ago(member.get('updated_at'))}")
    for line in status_lines(captured, excluded, dumped):
        print(line)
    if not status:
        print("no worker has reported yet")
        return 0
    who = "last leader (stopped)" if status.get("role") == "stopped" else "leader"
    print(f"{who} pid {status.get('pid')} on {status.get('host')} (token "
          f"{status.get('token') or '-'}), last report {cli_dumps.ago(status.get('updated_at'))}")
    for name in ("http", "checkpoint", "lag_bytes", "watermarks", "readers", "window", "windows",
                 "active_requests", "events_emitted", "events_replayed"):
        print(f"  {name}: {status.get(name) or '-'}")
    for request_id, dump in state.dump_statuses().items():
        print(f"  dump {request_id}: {dump.get('state', '?')}, priority "
              f"{dump.get('priority', '?')}"
              + (f", waiting: {dump['waiting']}" if dump.get("waiting") else "")
              + (f", throttle: {dump['throttle']}" if dump.get("throttle") else ""))
    return 0


def _throttle_options(parser: argparse.ArgumentParser) -> None:
    """The limits of automatic throttling (docs/operations.md); 0 turns one off."""
    group = parser.add_argument_group(
        "automatic throttling", "over a limit, the next chunk waits longer (up to 30 s "
        "more); 0 turns a limit off (the default)")
    for name, metavar in (("max_chunk_ms", "MS"), ("max_active_sessions", "N"),
                          ("max_replica_lag_ms", "MS"), ("max_log_lag_mb", "MIB")):
        high, unit, what = LIMITS[name]
        group.add_argument(f"--{name.replace('_', '-')}", type=int, metavar=metavar,
                           help=f"{what}{'' if unit == 'sessions' else f', in {unit}'} "
                                f"(default 0: off; 0-{high:,})")


def _verify(config: Config, args: argparse.Namespace) -> int:
    from dblog_worker.control.commands import captured_tables
    from dblog_worker.verify import command as verify
    from dblog_worker.verify import report as verify_report

    tables = list(dict.fromkeys(args.tables or captured_tables(config)))
    config.source.check_captured(tables)  # before the names make keys file names
    paths = verify_report.keys_paths(args.keys_out, tables) if args.keys_out else {}
    options = verify.VerifyOptions(range_rows=args.range_rows, delay_ms=args.delay_ms,
                                   recheck_s=args.recheck)
    result = verify.verify(config, tables, options)
    for table in result.tables:
        if table.table in paths and table.error is None:
            try:
                verify_report.write_keys(table, paths[table.table])
            except OSError as exc:
                raise TerminalError(f"cannot write the keys file: {exc}") from None
    print(json.dumps(result.to_json(), indent=2, ensure_ascii=False) if args.json
          else verify_report.render(result))
    return 0 if result.equal else 1


def _landing(config: Config, args: argparse.Namespace) -> int:
    try:
        return _landing_action(config, args)
    except OSError as exc:  # the store (S3Unavailable) or the folder
        print(f"error: cannot reach the landing zone {config.landing_path}: {exc}",
              file=sys.stderr)
        return 3


def _landing_action(config: Config, args: argparse.Namespace) -> int:
    from dblog_worker import lifecycle

    if args.action == "status":
        rows = lifecycle.landing_status(config, args.tables)
        if args.json:
            print(json.dumps([r.as_dict() for r in rows], indent=2))
        for row in [] if args.json else rows:
            merged = ("" if row.merged_segment is None else
                      f", merged to {row.merged_segment}, oldest unmerged "
                      f"{row.oldest_unmerged or '-'}")
            print(f"{row.table}: {row.files} file(s), {row.bytes:,} bytes, segments "
                  f"{row.first_segment}-{row.last_segment} in {row.active_files} file(s)"
                  f"{merged}{'  ERROR: ' + row.error if row.error else ''}")
        return 0 if not any(r.error for r in rows) else 1
    report = lifecycle.maintain(config, compact=args.action in ("compact", "maintain"),
                                retain=args.action in ("retain", "maintain"),
                                dry_run=args.dry_run, tables=args.tables)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        verb = "would" if args.dry_run else "did"
        for entry in report.tables:
            if entry.get("error"):
                print(f"{entry['table']}: ERROR: {entry['error']}")
                continue
            runs = cast(list[dict[str, object]], entry.get("compact") or [])
            gone = cast(list[dict[str, object]], [*entry.get("remove_replaced", []),  # type: ignore[misc]
                                                  *entry.get("remove_merged", [])])
            print(f"{entry['table']}: {verb} compact {len(runs)} run(s)"
                  f" ({', '.join(str(r['segments']) for r in runs)})"
                  f", {verb} remove {len(gone)} file(s)")
            for item in gone:
                print(f"  remove {item['location']} ({item['bytes']:,} bytes)")
    return 0 if report.ok else 1


def _reset(config: Config, args: argparse.Namespace) -> int:
    if not args.yes:
        raise RequestRejected(
            "reset forgets the checkpoint: the worker then starts from a new slot position, "
            "and changes in between are not captured. Repeat with --yes, then request "
            "`dblog dump --all`."
        )
    state = cli_dumps.state_of(config)
    lease = state.lease()
    if lease and not args.force:
        raise RequestRejected(
            f"worker {lease.get('holder')} holds the lease of source {config.source.name} (it "
            "leads): stop every worker of the source first (it would write its checkpoint "
            "back, and a standby would take over), or add --force"
        )
    status = state.status()
    # None: not a time, so maybe a moment ago
    age = cli_dumps.age_s(status.get("updated_at", "0"))
    stopped = status.get("role") == "stopped"
    if (age is None or age < 60) and not stopped and not args.force:
        raise RequestRejected(
            f"a worker (pid {status.get('pid')} on {status.get('host')}) reported "
            f"{'at an unknown time' if age is None else f'{age:.0f} s ago'}: stop it first "
            "(it would write its checkpoint back), or add --force"
        )
    state.forget_checkpoint()
    print(dialect(config.source.kind).forgotten_checkpoint(config.source))
    return 0


# -- formatting -------------------------------------------------------------------


if __name__ == "__main__":
    logging.basicConfig()
    sys.exit(main())
