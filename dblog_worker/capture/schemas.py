"""Schema versions of the captured tables, recorded in the landing zone.

A table's version is the number of the landing zone's schema file with the same
content; a schema not seen before gets the next number. The same columns always
map to the same version, also when a restart replays the log from before a change.

Schema files are immutable, so what this registry has read stays true; but another
worker of the source may have led meanwhile and written new versions. So a schema
this registry does not know is looked up in the landing zone again before it takes a
number, and a number another writer took in between is not taken twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from dblog_worker.capture.output import landing_errors
from dblog_worker.errors import LeaseLost
from dblog_worker.landing.sink import Sink

ATTEMPTS = 3  # numbers tried before concluding that another writer is active


class SchemaRegistry:
    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._known: dict[str, dict[str, int]] = {}

    def version(self, table: str, schema: Mapping[str, object]) -> int:
        with landing_errors():
            return self._version(table, schema)

    def _version(self, table: str, schema: Mapping[str, object]) -> int:
        text = json.dumps(schema, sort_keys=True)
        number = self._known.get(table, {}).get(text)
        if number is not None:
            return number
        for _ in range(ATTEMPTS):
            known = self._read(table)  # another leader may have written versions since
            number = known.get(text)
            if number is not None:
                return number
            number = max(known.values(), default=0) + 1
            try:
                self._sink.write_schema(table, number, schema)
            except ValueError:
                if number in self._read(table).values():
                    continue  # another writer took the number in between: the next one
                raise
            known[text] = number
            return number
        raise LeaseLost(
            f"schema versions of {table} kept being written by another writer while this "
            "worker took a number: another worker leads this source"
        )

    def _read(self, table: str) -> dict[str, int]:
        """The table's versions as the landing zone has them now (and remembered)."""
        known = self._known[table] = {
            json.dumps(document, sort_keys=True): number
            for number, document in self._sink.schemas(table).items()
        }
        return known
