"""The dump commands of ``dblog``: dump, list, show, wait, pause/resume/cancel, set; and
the text tables they print. :mod:`dblog_worker.cli` parses the arguments."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from dblog_worker.config import Config
from dblog_worker.control import (
    command,
    create_dump,
    describe_knobs,
    entry_json,
    entry_of,
    list_entries,
    request_json,
    show_record_json,
)
from dblog_worker.control import (
    set_knobs as change_knobs,
)
from dblog_worker.dump_spec import DumpSpec, Knobs
from dblog_worker.errors import RequestRejected
from dblog_worker.requests import (
    COMMANDS,
    DumpKind,
    DumpRequest,
    MalformedRequest,
    RequestState,
    TableProgress,
)
from dblog_worker.state import StateStore
from dblog_worker.throttle import LIMITS


def state_of(config: Config) -> StateStore:
    return StateStore(config.redis_url, config.source.name)



def dump(config: Config, args: argparse.Namespace) -> int:
    raw_keys = args.keys
    if args.keys_file is not None:
        try:
            raw_keys = args.keys_file.read_text()
        except OSError as exc:
            raise RequestRejected(f"cannot read the keys file: {exc}") from None
    keys = None
    if raw_keys is not None:
        try:
            keys = json.loads(raw_keys)
        except json.JSONDecodeError as exc:
            raise RequestRejected(f"keys are not valid JSON: {exc}") from None
    kind = DumpKind.ALL if args.all else DumpKind.KEYS if raw_keys is not None else DumpKind.TABLES
    spec = DumpSpec.of(kind, None if args.all else args.tables, keys,
                       chunk_size=args.chunk_size, delay_ms=args.delay_ms,
                       client_token=args.client_token, parallelism=args.parallelism,
                       where=args.where, from_key=args.from_key, to_key=args.to_key,
                       throttle=throttle_limits(args), prune=args.prune,
                       priority=args.priority)
    state = state_of(config)
    request = create_dump(config, state, spec)
    if args.json:
        print(json.dumps(request_json(request, {})))
    else:
        print(f"{request.id} {request.state.value}: {request.kind.value} "
              f"{', '.join(request.tables)}"
              + (f" ({request.key_count} keys)" if request.key_count else "")
              + (f" where {request.row_filter.describe()}" if request.row_filter else "")
              + (", pruning" if request.prune else "")
              + f", priority {request.priority.value}")
    if args.wait:
        return follow(state, request.id, 0)
    return 0


def list_dumps(config: Config, args: argparse.Namespace) -> int:
    entries = list_entries(state_of(config), active_only=args.active)
    if args.json:
        print(json.dumps([entry_json(entry) for entry in entries], indent=2))
        return 0
    rows = [("ID", "STATE", "PRIORITY", "KIND", "TABLES", "ROWS", "CHUNK", "DELAY", "CREATED")]
    malformed = []
    for entry in entries:
        if isinstance(entry, MalformedRequest):
            rows.append((entry.id, "malformed", "-", "-", "-", "-", "-", "-", "-"))
            malformed.append(entry)
            continue
        request, progress = entry
        rows.append((
            request.id, request.state.value, request.priority.value, request.kind.value,
            done_tables(request, progress), str(sum(p.rows for p in progress.values())),
            str(request.chunk_size), f"{request.delay_ms}ms",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(request.created_at)),
        ))
    print(text_table(rows))
    for record in malformed:
        print(f"{record.id}: {record.error}")
    return 0


def show(config: Config, args: argparse.Namespace) -> int:
    """A request and its progress; a malformed one as such (exit 1)."""
    state = state_of(config)
    if args.json:
        document = show_record_json(state, args.id)
        print(json.dumps(document, indent=2))
        return 1 if "malformed" in document else 0
    entry = entry_of(state, state.get_record(args.id))
    if isinstance(entry, MalformedRequest):
        print(f"{entry.id}: malformed\nerror: {entry.error}")
        for name, value in entry.fields.items():
            print(f"  {name}: {value}")
        return 1
    request, progress = entry
    print(f"{request.id}: {request.state.value} ({request.kind.value}), priority "
          f"{request.priority.value}, chunk size {request.chunk_size}, delay "
          f"{request.delay_ms} ms, parallelism {request.parallelism}")
    if request.row_filter is not None:
        print(f"where: {request.row_filter.describe()}")
    if request.throttle.on:
        print(f"throttle limits: {request.throttle.describe()}")
    if request.error:
        print(f"error: {request.error}")
    running = state.dump_status(request.id)
    if running.get("waiting"):
        print(f"waiting: {running['waiting']}")
    if running.get("throttle"):
        print(f"throttle: {running['throttle']}")
    rows = [("TABLE", "STATE", "CHUNKS", "SELECTED", "ROWS", "DROPPED", "MISSING", "LAST KEY")]
    for table in request.tables:
        p = progress.get(table) or TableProgress(table)
        rows.append((table, "done" if p.done else ("running" if p.started or p.chunks else
                                                   "pending"),
                     str(p.chunks), str(p.selected), str(p.rows), str(p.dropped), str(p.missing),
                     json.dumps(p.last_key) if p.last_key else "-"))
    print(text_table(rows))
    return 0


def wait(config: Config, args: argparse.Namespace) -> int:
    return follow(state_of(config), args.id, args.timeout)


WORKER_SILENT_S = 30  # a worker reports every status_interval_s (1 s by default)


def follow(state: StateStore, request_id: str, timeout: float) -> int:
    """Print progress until the request ends: 0 if it completed, 1 otherwise."""
    started = time.monotonic()
    last_line = ""
    warned: str | None = None
    interactive = sys.stdout.isatty()
    while True:
        request = state.get_request(request_id)
        progress = state.progress(request_id)
        rows = sum(p.rows for p in progress.values())
        line = (f"{request.id} {request.state.value}: tables {done_tables(request, progress)}, "
                f"{rows} rows, {sum(p.chunks for p in progress.values())} chunks")
        if line != last_line:
            print(("\r" + line) if interactive else line, end="" if interactive else "\n",
                  flush=True)
            last_line = line
        if request.state.terminal:
            if interactive:
                print()
            if request.error:
                print(f"{request.id} {request.state.value}: {request.error}", file=sys.stderr)
            return 0 if request.state is RequestState.COMPLETED else 1
        if timeout and time.monotonic() - started > timeout:
            print(f"\n{request.id} still {request.state.value} after {timeout} s",
                  file=sys.stderr)
            return 1
        silence = None
        if time.monotonic() - started >= WORKER_SILENT_S:
            silence = worker_silence(state)
        if silence is not None and silence != warned:
            print(f"\n{silence}: is `dblog run` running for this source? The request waits "
                  "in Redis until a worker takes it", file=sys.stderr)
            warned = silence
        time.sleep(0.5)


def age_s(updated_at: str | None) -> float | None:
    """Seconds since a Unix time a worker wrote in Redis; None if missing or not a number."""
    try:
        return time.time() - float(updated_at or "")
    except ValueError:
        return None


def worker_silence(state: StateStore) -> str | None:
    """Says so when no worker has reported for over 30 s (in whole minutes after the first,
    so that the warning repeats once a minute); None while one reports."""
    age = age_s(state.status().get("updated_at"))
    if age is None:
        return "no worker of this source has ever reported"
    if age < WORKER_SILENT_S:
        return None
    return ("no worker of this source has reported for "
            + (f"{int(age // 60)} min" if age >= 60 else f"over {WORKER_SILENT_S} s"))


def control(config: Config, args: argparse.Namespace) -> int:
    previous = command(state_of(config), args.id, args.command)
    print(f"{args.id}: {previous.value} -> {COMMANDS[args.command][0].value}")
    return 0


def set_knobs(config: Config, args: argparse.Namespace) -> int:
    throttle = dict.fromkeys(LIMITS, 0) if args.no_throttle else {}
    throttle.update(throttle_limits(args))
    knobs = Knobs.of(chunk_size=args.chunk_size, delay_ms=args.delay_ms,
                     parallelism=args.parallelism, throttle=throttle or None,
                     priority=args.priority)
    print(describe_knobs(change_knobs(state_of(config), args.id, knobs)))
    return 0


def throttle_limits(args: argparse.Namespace) -> dict[str, int]:
    """The throttle limits given as options (``--max-chunk-ms`` ...)."""
    return {name: value for name in LIMITS if (value := getattr(args, name)) is not None}



def ago(updated_at: str | None) -> str:
    age = age_s(updated_at)
    return "at an unknown time" if age is None else f"{age:.1f} s ago"


def done_tables(request: DumpRequest, progress: dict[str, TableProgress]) -> str:
    done = sum(1 for t in request.tables if (p := progress.get(t)) is not None and p.done)
    return f"{done}/{len(request.tables)}"


def text_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)

