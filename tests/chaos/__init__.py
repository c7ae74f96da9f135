"""The chaos suite (issue 7, high availability): real ``dblog run`` workers, leader and
standbys, against real PostgreSQL, MariaDB and Redis, while things fail.

Scenarios (tests/chaos/test_chaos.py, tests/chaos/test_chaos_outages.py), each against
PostgreSQL and MariaDB unless noted:

1. ``kill -9`` of the leader at random instants during dumps, a standby waiting: the
   takeover (kill until the status hash's token grows and the new leader streams) stays
   under ``ttl_s + standby_poll_s + 5`` s; the dumps complete.
2. ``SIGSTOP`` of the leader for longer than its lease (``ttl_s = 2``), a standby takes
   over, then ``SIGCONT``: the old leader commits no segment and saves no checkpoint or
   status after that, and logs ``lease lost``.
3. Redis restarted with its data (a persistent Redis, ``RedisServer(persistent=True)``)
   mid-dump; Redis emptied while the worker is stopped (MariaDB): the worker refuses to
   start, exits non-zero and says what to do.
4. The source database restarted mid-window, and the worker's source connections killed
   from the server (``pg_terminate_backend``, the walsender too; MariaDB's ``KILL``).
5. The landing zone's disk full (a small tmpfs, mounted by the test: it runs as root or
   with CAP_SYS_ADMIN): the checkpoint stays put, the worker says so and stays alive;
   once space is freed it goes on.
6. Two workers started at the same instant: exactly one leads.

Scenarios 1, 2 and 6, the leader's failures, also run with the landing zone in a bucket of
SeaweedFS (``postgresql-s3``): the fencing there is the S3 protocol's (conditional
writes, docs/landing-format.md). A bucket's commit times are whole seconds, so scenario 2
allows a second in its time checks; the order of the writers' tokens along each table
is exact. The object store itself fails in tests/integration/test_s3_landing.py (killed
mid-dump, a full bucket quota).

Every scenario is seeded (the seed is in the test id), writes through the *ledger*
workload (tests/chaos/ledger.py: every committed write, by table, key, version and op)
and ends with the scenario suite's checks: the output equals the tables, no key's
version goes back; then the ledger: **lost** writes (committed, never landed as a log
event) must be 0; **duplicated** output is reported: log events landing twice (must be
0) and dump rows landing twice for the same dump and key (allowed after a fault). The
``dblog.writer`` tokens of each table's segments, in sequence order, never decrease.

Each test's figures (lost, duplicated, takeover times, ...) are attached to it
(``record_property``: ``--junitxml`` carries them), printed, and listed in a "chaos
report" section at the end of the run.

Run it::

    .venv/bin/python -m pytest tests/chaos -q

The CI version runs one seed per scenario with a few seconds of load (2 kills in
scenario 1), about three minutes on two cores. The long version, ``DBLOG_CHAOS_LONG=1``,
runs seeds 1 to 3, 60 s of load per run, 20 kills in scenario 1, 5 freezes, 5 Redis and
source restarts and 10 connection kills, with a one-hour timeout per test::

    DBLOG_CHAOS_LONG=1 .venv/bin/python -m pytest tests/chaos -q

``DBLOG_CHAOS_SEEDS=4,5`` runs other seeds (with either version), to repeat a failure
or to look further.
"""
