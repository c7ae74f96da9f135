"""Places in the binary log of MySQL or MariaDB: where a restart resumes, and where the
events of a prepared XA transaction lie.

``BinlogCheckpoint`` is what a source keeps in Redis: the end of a transaction, by binlog
file and position, with the GTID state there and whose log it is. ``file_number`` turns a
binlog file name into the major part of a :class:`~dblog_worker.position.Position`.
``PreparedXa`` and ``XaCommit`` are the translator's records of XA transactions
(:mod:`dblog_worker.mysql.translate`): where a prepared group lies, read again at its commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from dblog_worker.errors import ProtocolError
from dblog_worker.position import Position

__all__ = [
    "BinlogCheckpoint",
    "PreparedXa",
    "XaCommit",
    "Xid",
    "file_number",
    "gtids_by_domain",
    "xid_text",
]


@dataclass(frozen=True, slots=True)
class BinlogCheckpoint:
    """Where to resume: the end of a transaction, by file and position, and the GTID
    state there: MariaDB, one ``domain-server-seq`` per domain; MySQL, the executed GTID
    set (``uuid:1-77,uuid2:1-5``); empty where GTIDs are off or unknown."""

    file: str
    pos: int
    gtid: str = ""
    server: str = ""  # whose log: "server_id=1" (MariaDB), "server_uuid=…" (MySQL); "": unknown

    def encode(self) -> str:
        fields: dict[str, object] = {"file": self.file, "pos": self.pos, "gtid": self.gtid}
        if self.server:
            fields["server"] = self.server
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> BinlogCheckpoint:
        try:
            data = json.loads(text)
            return cls(str(data["file"]), int(data["pos"]), str(data.get("gtid", "")),
                       str(data.get("server", "")))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ProtocolError(
                f"checkpoint {text!r} is not a binlog checkpoint: was this source's Redis "
                "state written for a PostgreSQL source? Use another source name"
            ) from None

    @property
    def position(self) -> Position:
        return Position(file_number(self.file), self.pos)

    @property
    def mysql_gtid_set(self) -> bool:
        """The GTID state is a MySQL GTID set (``uuid:interval``), not MariaDB's."""
        return ":" in self.gtid


def file_number(name: str) -> int:
    """``mariadb-bin.000042`` → 42: binlog files are numbered in order."""
    _, _, suffix = name.rpartition(".")
    if not suffix.isdigit():
        raise ProtocolError(f"binlog file name {name!r} does not end in a number")
    return int(suffix)


def gtids_by_domain(state: str) -> dict[int, str]:
    """MariaDB's GTID state (``0-1-5,1-2-9``): its ``domain-server-seq`` by domain."""
    gtids = {}
    for gtid in filter(None, (g.strip() for g in state.split(","))):
        domain, _, _ = gtid.partition("-")
        if domain.isdigit():
            gtids[int(domain)] = gtid
    return gtids


Xid = tuple[int, bytes, bytes]  # an XA transaction's id: format id, gtrid, bqual


def xid_text(xid: Xid) -> str:
    """As the binary log spells it: ``X'6131',X'',1``."""
    return f"X'{xid[1].hex()}',X'{xid[2].hex()}',{xid[0]}"


@dataclass(frozen=True, slots=True)
class PreparedXa:
    """Where the event group of a prepared XA transaction lies in the binary log (its
    rows are read again from there at its XA COMMIT), and ``resume``: the end of the
    transaction before it, where a restart begins while it waits for its commit."""

    file: str
    start: int  # where the group's first event begins
    end: int  # where its XA_PREPARE event ends (0 while the group is being read)
    resume: BinlogCheckpoint
    captured: bool = False  # it changed a captured table


@dataclass(slots=True)
class XaCommit:
    """A commit of an XA transaction that changed captured tables: the reader reads its
    prepared group again; its rows take ``position`` (the XA COMMIT event's) with twice
    their index in the group (plus one for a key change's create)."""

    xid: Xid
    prepared: PreparedXa
    position: Position
    commit_ts_us: int
    rows: int = 0  # captured rows of the group read again so far
    opened: bool = False  # the group's first event was read again
    complete: bool = False  # and its XA_PREPARE event
    changes: list[tuple[str, str | None]] = field(default_factory=list)  # (table, key)
    overflow: set[str] = field(default_factory=set)  # tables of changes not kept
