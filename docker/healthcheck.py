#!/usr/bin/env python3
"""The Docker health check of a capture worker (installed as ``dblog-healthcheck``).

Healthy while the worker of this container reports to Redis: its entry in the source's
members list (what ``dblog status`` shows, leader or standby) is at most
``DBLOG_HEALTH_MAX_AGE_S`` seconds old (default 30), and, if it leads, so is its status
report. A leader reports while it streams the log and a standby while it watches the
lease, so a worker that cannot reach its source (leader) or Redis (either) turns
unhealthy. The configuration is ``$DBLOG_CONFIG``.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from dblog_worker import config as config_module
from dblog_worker.control.store import StateStore
from dblog_worker.errors import DblogError


def main() -> int:
    max_age = float(os.environ.get("DBLOG_HEALTH_MAX_AGE_S", "30"))
    path = os.environ.get("DBLOG_CONFIG")
    if not path:
        print("unhealthy: DBLOG_CONFIG is not set", file=sys.stderr)
        return 1
    try:
        config = config_module.load(path)
        state = StateStore(config.redis_url, config.source.name)
        try:
            members, status = state.members(), state.status()
        finally:
            state.close()
    except DblogError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    host = socket.gethostname()
    mine = [m for m in members if m.get("host") == host]
    if not mine:
        print(f"unhealthy: no worker of source {config.source.name} on this container ({host}) "
              "has reported", file=sys.stderr)
        return 1
    member = mine[0]  # the leader first
    age = time.time() - float(member.get("updated_at", "0"))
    if age > max_age:
        print(f"unhealthy: the worker last reported {age:.0f} s ago (more than {max_age:.0f} s)",
              file=sys.stderr)
        return 1
    role = member.get("role", "?")
    if role == "leader":
        report = time.time() - float(status.get("updated_at", "0"))
        if status.get("host") != host or report > max_age:
            print(f"unhealthy: this worker leads but has not reported its stream for "
                  f"{report:.0f} s", file=sys.stderr)
            return 1
    print(f"healthy: {role} of source {config.source.name}, reported {age:.1f} s ago")
    return 0


if __name__ == "__main__":
    sys.exit(main())
