"""Remove the target rows whose key the source does not have: what a primary-key dump cannot.

``dblog verify`` reports such keys as *extra*. A primary-key dump of them finds nothing in
the source and only reports them missing: the worker emits no delete for a key it does not
find, so the merge never removes the row. The repair DAG removes them here, without ever
removing a row the source has (again):

1. read each extra key's row in the target, with the position that wrote it
   (``_dblog_position``; NULL for a row the merge did not write);
2. look the keys up in the source, as a primary-key dump does;
3. delete each key the source still lacks, only where the target row still has the
   position read in 1 (a lake target's rows: read and deleted without Spark, each delete
   one commit, :mod:`dblog_worker.lake.rows`).

A key the source inserts after 2 reaches the target through the log and the merge: before
3, the row's position changed and it is kept; after 3, the merge inserts it anew. The
removal leaves no tombstone: the merge only applies events newer than what it merged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dblog_worker import kinds
from dblog_worker.config import Config
from dblog_worker.dialect import open_source
from dblog_worker.dump.requests import KeyTexts, parse_keys
from dblog_worker.errors import TargetError
from dblog_worker.merge.loop import open_target
from dblog_worker.merge.target import POSITION_COLUMN

__all__ = ["ExtraRemoval", "remove_extra"]

log = logging.getLogger(__name__)

LOOKUP_BATCH = 1000  # keys per source lookup, as a key dump's batches


@dataclass
class ExtraRemoval:
    """What :func:`remove_extra` did with each key (as verify and a key dump spell keys)."""

    removed: list[list[object]] = field(default_factory=list)
    kept: list[tuple[list[object], str]] = field(default_factory=list)  # key, why


def remove_extra(config: Config, table: str, keys: Sequence[object]) -> ExtraRemoval:
    """Delete the target rows of ``keys`` (source ``table``'s keys, as verify reports them:
    a value for a one-column key, a list for a composite one) that the source does not have.
    """
    result = ExtraRemoval()
    if not keys:
        return result
    target_config = config.require_target()
    target_table = target_config.table(table)
    source = open_source(config.source, lambda name, schema: 0)
    target: Any = (kinds.lake("rows").LakeRows(target_config) if target_config.is_lake
                   else open_target(target_config))
    source.connect()
    try:
        target.connect()
        columns = target.table_columns(target_table)
        key_columns = target.primary_key(target_table)
        if columns is None or not key_columns:
            raise TargetError(f"target table {target_table} does not exist or has no primary key")
        if POSITION_COLUMN not in columns:
            raise TargetError(f"target table {target_table} has no {POSITION_COLUMN} column: "
                              "its rows were not written by the merge; delete them yourself")
        arity = source.tables.key_arity(table)
        values: dict[KeyTexts, list[object]] = {}  # each key's texts -> as it was given
        for raw in keys:
            given = list(raw) if isinstance(raw, list) else [raw]
            values.setdefault(parse_keys([given], arity)[0], given)
        positions: dict[KeyTexts, object] = {}
        for key, value in values.items():  # 1. the target rows and their positions, first
            exists, position = target.row_position(target_table, key_columns, columns, key)
            if exists:
                positions[key] = position
            else:
                result.kept.append((value, "not in the target any more"))
        found = list(positions)
        lacking: set[KeyTexts] = set()
        for start in range(0, len(found), LOOKUP_BATCH):  # 2. then the source
            batch = found[start:start + LOOKUP_BATCH]
            lacking.update(source.chunks.read_keys(table, batch).missing)
        for key, position in positions.items():  # 3. delete what the source still lacks
            value = values[key]
            if key not in lacking:
                result.kept.append((value, "the source has it now: a key dump repairs it"))
                continue
            if target.delete_row(target_table, key_columns, columns, key, position):
                result.removed.append(value)
            else:
                result.kept.append((value, "the merge wrote it meanwhile"))
    finally:
        source.close()
        target.close()
    log.info("%s -> %s: removed %d extra row(s), kept %d", table, target_table,
             len(result.removed), len(result.kept))
    return result
