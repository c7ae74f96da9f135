"""Schema versions of the captured tables, recorded in the landing zone.

A table's version is the number of the landing zone's schema file with the same
content; a schema not seen before gets the next number. The same columns always
map to the same version, also when a restart replays the log from before a change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from dblog_worker.landing import LandingZone
from dblog_worker.output import landing_errors


class SchemaRegistry:
    def __init__(self, landing: LandingZone) -> None:
        self._landing = landing
        self._known: dict[str, dict[str, int]] = {}

    def version(self, table: str, schema: Mapping[str, object]) -> int:
        with landing_errors():
            return self._version(table, schema)

    def _version(self, table: str, schema: Mapping[str, object]) -> int:
        text = json.dumps(schema, sort_keys=True)
        known = self._known.get(table)
        if known is None:
            known = self._known[table] = {
                json.dumps(document, sort_keys=True): number
                for number, document in self._landing.schemas(table).items()
            }
        number = known.get(text)
        if number is None:
            number = max(known.values(), default=0) + 1
            self._landing.write_schema(table, number, schema)
            known[text] = number
        return number
