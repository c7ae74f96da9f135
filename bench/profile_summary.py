"""Summarize a ``--profile`` file: where each of the worker's threads spends its samples.

``python -m bench.profile_summary FILE [--top N] [--match TEXT ...]``

The input is py-spy's ``--format raw`` output as ``WorkerRun`` records it (200 Hz, waits
included with ``--idle``): one collapsed stack per line, root first, then a sample count.
Threads are told apart by the function that runs them: the main loop
(``Worker.run_forever``), the binlog reader (``BinlogReader._run``), the pgoutput reader,
and the pool threads (``concurrent.futures``' ``_worker``: the segment writer and the
chunk encoder). For each thread: the share of its samples spent waiting (the innermost
frame is a blocking call), then the functions with the most samples, inclusive (on the
stack) and self (innermost frame), as % of the thread's samples.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

_FRAME = re.compile(r"^(?P<name>.*?) \((?P<where>[^()]*)\)$")
# Innermost frames that mean the thread is blocked, not computing.
WAITS = (
    "select", "poll", "wait", "_wait_for_tstate_lock", "acquire", "sleep", "recv_into",
    "readinto", "recv", "read", "get", "fsync", "accept", "epoll", "_recv", "join",
)
_WAIT_FILES = ("threading.py", "queue.py", "selectors.py", "socket.py", "ssl.py")


def thread_of(frames: Sequence[str]) -> str:
    names = [frame_name(f) for f in frames]
    for name in names:
        if name == "BinlogReader._run":
            return "binlog reader"
        if name == "_worker":
            return "pool (writer/encoder)"
        if name.startswith("Worker.") or name == "main":
            return "main loop"
    return "other"


def frame_name(frame: str) -> str:
    match = _FRAME.match(frame)
    return match["name"] if match else frame


def frame_label(frame: str) -> str:
    """``name (file:line)`` without the line: one entry per function."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    where = match["where"].rsplit(":", 1)[0]
    return f"{match['name']} ({where})"


def is_wait(frames: Sequence[str]) -> bool:
    last = frames[-1] if frames else ""
    match = _FRAME.match(last)
    if match is None:
        return False
    name, where = match["name"], match["where"]
    if name == "_worker" and "concurrent/futures/thread.py" in where:
        return True  # an idle pool thread, blocked in its queue's get (C code)
    return (name in WAITS or name.split(".")[-1] in WAITS) and (
        any(where.startswith(f) or f"/{f}" in where for f in _WAIT_FILES)
        or "<built-in>" in where or name in ("select", "poll", "sleep", "fsync")
    )


def summarize(path: Path, top: int, matches: Sequence[str]) -> str:
    totals: Counter[str] = Counter()
    waits: Counter[str] = Counter()
    inclusive: dict[str, Counter[str]] = {}
    own: dict[str, Counter[str]] = {}
    matched: dict[str, Counter[str]] = {}
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = thread_of(frames)
        totals[thread] += count
        if is_wait(frames):
            waits[thread] += count
            waits[f"{thread}:{frame_label(frames[-1])}"] += count
            continue
        labels = [frame_label(f) for f in frames]
        inclusive.setdefault(thread, Counter()).update({label: count for label in set(labels)})
        own.setdefault(thread, Counter())[labels[-1]] += count
        for text in matches:
            if any(text in label for label in labels):
                matched.setdefault(thread, Counter())[text] += count
    lines = [f"{path}: {sum(totals.values())} samples"]
    for thread, total in totals.most_common():
        busy = total - waits[thread]
        lines.append(f"\n== {thread}: {total} samples ({total / 200:.1f} s at 200 Hz), "
                     f"busy {busy} ({100 * busy / total:.1f} %), "
                     f"waiting {waits[thread]} ({100 * waits[thread] / total:.1f} %)")
        wait_frames = [(k.split(":", 1)[1], v) for k, v in waits.items()
                       if k.startswith(f"{thread}:")]
        for label, count in sorted(wait_frames, key=lambda kv: -kv[1])[:4]:
            lines.append(f"   wait {100 * count / total:5.1f} %  {label}")
        for text, count in (matched.get(thread) or Counter()).most_common():
            lines.append(f"  match {100 * count / total:5.1f} % of thread, "
                         f"{100 * count / max(busy, 1):5.1f} % of busy  {text}")
        for title, counts in (("inclusive", inclusive), ("self", own)):
            lines.append(f"  {title} (% of the thread's samples, % of its busy samples):")
            for label, count in (counts.get(thread) or Counter()).most_common(top):
                lines.append(f"   {100 * count / total:5.1f} {100 * count / max(busy, 1):5.1f}"
                             f"  {label}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_summary",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", action="append", default=[],
                        help="also report the samples with a frame containing TEXT")
    args = parser.parse_args(argv)
    print(summarize(args.file, args.top, args.match))
    return 0


if __name__ == "__main__":
    sys.exit(main())
