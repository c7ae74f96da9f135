#!/usr/bin/env python3
"""The Docker health check of a capture worker (installed as ``dblog-healthcheck``).

Healthy while the worker of this container reports its status to Redis (what ``dblog status``
shows): the last report is at most ``DBLOG_HEALTH_MAX_AGE_S`` seconds old (default 30) and
comes from this host. The worker reports while it streams the log, so a worker that cannot
reach its source or Redis turns unhealthy. The configuration is ``$DBLOG_CONFIG``.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from dblog_worker import config as config_module
from dblog_worker.errors import DblogError
from dblog_worker.state import StateStore


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
            status = state.status()
        finally:
            state.close()
    except DblogError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    if not status:
        print(f"unhealthy: no worker of source {config.source.name} has reported yet",
              file=sys.stderr)
        return 1
    age = time.time() - float(status.get("updated_at", "0"))
    host = status.get("host")
    if host != socket.gethostname():
        print(f"unhealthy: the last report of source {config.source.name} came from {host}, "
              f"not from this container ({socket.gethostname()})", file=sys.stderr)
        return 1
    if age > max_age:
        print(f"unhealthy: the worker last reported {age:.0f} s ago (more than {max_age:.0f} s)",
              file=sys.stderr)
        return 1
    print(f"healthy: source {config.source.name}, reported {age:.1f} s ago")
    return 0


if __name__ == "__main__":
    sys.exit(main())
