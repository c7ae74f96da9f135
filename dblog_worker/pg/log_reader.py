"""The log of a PostgreSQL source: its replication slot, streamed with pgoutput.

:class:`PgLogReader` is the source's ``log`` part: it starts the stream after a checkpoint
(taking the slot over from a previous worker), polls it through the
:class:`~dblog_worker.pg.translate.LogTranslator` (which describes each relation with the
chunk reader's codecs), confirms checkpoints, and reads how far the log has gone. The
watermark writes' snapshots come back to it (:meth:`PgLogReader.observe`): the
transactions a window's low watermark did not see count as inside that window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psycopg

from dblog_worker.config import SourceConfig
from dblog_worker.errors import ConfigError, DumpFailed, LogGone
from dblog_worker.events import Checkpoint, LogItem
from dblog_worker.pg import catalog
from dblog_worker.pg import pgoutput as pg
from dblog_worker.pg.connection import Connection, connection_errors
from dblog_worker.pg.options import PgOptions
from dblog_worker.pg.reads import PgChunkReader
from dblog_worker.pg.stream import ReplicationStream
from dblog_worker.pg.translate import LogTranslator, RelationKind, RelationView
from dblog_worker.pg.visibility import Snapshot
from dblog_worker.position import Position
from dblog_worker.tables import WATERMARK_SCHEMA as SCHEMA
from dblog_worker.tables import CapturedSet

log = logging.getLogger(__name__)

# How often, at most, a snapshot tells which transactions read from the log every later
# snapshot sees (so they need no remembering, and the checkpoint may pass them): while
# transactions are remembered; more often when they are many or the log has paused (the
# checkpoint then moves on at once) (visibility.py).
SNAPSHOT_S = 0.5
SNAPSHOT_SOON_S = 0.05


class PgLogReader:
    """The source's log part: the replication slot's stream, on ``conn``'s database."""

    def __init__(self, config: SourceConfig, options: PgOptions,
                 conn: Callable[[], Connection], captured: CapturedSet,
                 chunks: PgChunkReader) -> None:
        self.config = config
        self.options = options
        self.name = config.name
        self._conn = conn
        self.captured = captured
        self.chunks = chunks
        self._stream: ReplicationStream | None = None
        self._snapshot_at = 0.0
        self.translator = LogTranslator(config.name, self._describe)

    @property
    def conn(self) -> Connection:
        return self._conn()

    def start(self, checkpoint: str | None, landed: Position | None = None) -> str:
        """Start the log after ``checkpoint`` (the slot's own position when None); the
        positions of its events and windows never need ``landed``."""
        with connection_errors("reading the slot"):
            row = self.conn.execute(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                (self.options.slot,),
            ).fetchone()
        if row is not None and row[0] == "lost":
            raise LogGone(
                f"replication slot {self.options.slot} lost the log it held (wal_status lost, "
                "max_slot_wal_keep_size was exceeded): changes since checkpoint "
                f"{checkpoint} are gone. Drop the slot (SELECT pg_drop_replication_slot("
                f"'{self.options.slot}');), run `dblog reset --yes --config <file>`, start the "
                "worker, then `dblog dump --all` to bring the output back in sync"
            )
        if row is None:
            raise LogGone(
                f"replication slot {self.options.slot} does not exist any more: the log since "
                f"checkpoint {checkpoint} is gone. Run `dblog reset --yes --config <file>` to "
                "start capture anew, then `dblog dump --all` to bring the output back in sync"
            )
        try:
            lsn = pg.parse_lsn(checkpoint) if checkpoint else 0
        except ValueError:
            raise ConfigError(
                f"the checkpoint in Redis, {checkpoint!r}, is not a PostgreSQL log position: "
                "was this source's state written for a MySQL source? Use another source name, "
                "or `dblog reset --yes --config <file>` and a full dump"
            ) from None
        self._take_slot()
        self.translator = LogTranslator(self.name, self._describe)
        self._stream = ReplicationStream(
            self.config.dsn, self.options.slot, self.options.publication, self.translator,
            messages=not self.options.watermark_table,
        )
        self._stream.start(lsn)
        return pg.format_lsn(lsn)

    def _take_slot(self) -> None:
        """A previous leader that stopped (paused, partitioned) may still hold the slot: its
        walsender would keep it until wal_sender_timeout. This worker holds the lease now:
        end that walsender."""
        sql = ("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s "
               "AND active_pid IS NOT NULL")
        with connection_errors("taking over the slot"):
            row = self.conn.execute(sql, (self.options.slot,)).fetchone()
            if row is None:
                return
            log.warning("replication slot %s is still in use by backend %s (a previous "
                        "worker): ending it", self.options.slot, row[0])
            try:
                self.conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            except psycopg.errors.InsufficientPrivilege:
                log.warning("the worker's role may not end backend %s: the slot is taken "
                            "over once wal_sender_timeout ends it", row[0])
                return
            deadline = time.monotonic() + 5
            while self.conn.execute(sql, (self.options.slot,)).fetchone() is not None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)

    def poll(self, timeout: float, out: list[LogItem]) -> None:
        assert self._stream is not None
        read = len(out)
        self._stream.poll(timeout, out)
        translator = self.translator
        recent = translator.recent
        if not recent:
            return
        every = SNAPSHOT_SOON_S if recent.over_limit or len(out) == read else SNAPSHOT_S
        if time.monotonic() - self._snapshot_at < every:
            return
        with connection_errors("reading the snapshot"):
            row = self.conn.execute("SELECT pg_current_snapshot()::text").fetchone()
        assert row is not None
        self._snapshot_at = time.monotonic()
        held = recent.oldest()
        translator.observe(Snapshot.parse(str(row[0])))
        if recent.oldest() != held and not translator.in_transaction and translator.read_to:
            out.append(translator.checkpoint(translator.read_to))  # held back less now

    def encode_checkpoint(self, checkpoint: Checkpoint) -> str:
        return checkpoint.resume or pg.format_lsn(checkpoint.position.major)

    def confirm(self, checkpoint: str) -> None:
        assert self._stream is not None
        self._stream.confirm(pg.parse_lsn(checkpoint))

    def lag_bytes(self) -> int:
        if self._stream is None:
            return 0
        return max(0, self._stream.server_wal_end - self._stream.received_lsn)

    def _describe(self, relation: pg.Relation) -> RelationView:
        table = f"{relation.namespace or 'pg_catalog'}.{relation.name}"
        names = [c.name for c in relation.columns]
        if relation.namespace == SCHEMA and relation.name == "watermark":
            return RelationView(RelationKind.WATERMARK, table,
                                watermark_columns=(names.index("source"), names.index("value")))
        if table not in self.captured:
            return RelationView(RelationKind.IGNORED, table)
        captured = self.chunks.captured.known(table)
        if captured is None or captured.info.oid != relation.relation_oid:
            try:
                captured = self.chunks.load(table)
            except DumpFailed as exc:  # dropped since, or lost its key: replaying old changes
                captured = None
                log.warning("%s; its old changes are keyed by their replica identity", exc)
        generated: tuple[tuple[str, str, str], ...] = ()
        if captured is not None:
            key, generated = captured.info.key_columns, captured.info.generated
        else:
            key = tuple(c.name for c in relation.columns if c.flags & 1)
        oids = [c.type_oid for c in relation.columns]
        codec, version = self.chunks.codec(table, names, oids, key, generated)
        if captured is not None and not captured.info.key_in_log:
            log.warning("%s", catalog.identity_problems(captured.info)[0].what)
        return RelationView(RelationKind.CAPTURED, table, codec, version,
                            full_identity=relation.replica_identity == "f")

    def log_position(self) -> Position:
        """The end of the log now, comparable with checkpoints: every commit so far is before
        it. The insert position: under ``synchronous_commit = off`` a commit returns before
        its WAL is written, so the write position can still be behind it."""
        with connection_errors("reading the log position"):
            row = self.conn.execute(
                "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        return Position(int(row[0]), 0)

    def observe(self, snapshot: Snapshot, token: str | None) -> None:
        """A watermark write's snapshot (``token`` None for a heartbeat's)."""
        self._snapshot_at = time.monotonic()
        self.translator.observe(snapshot, token)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
