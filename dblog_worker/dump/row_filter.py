"""Filtered dumps: which rows of a table a dump reads, as structured conditions.

A :class:`RowFilter` is conditions on columns (column, operator, bound values — never
SQL text), all of which a row must meet, and an optional primary-key range (``from_key``
and ``to_key``, both included). The source spells it into every SELECT of the dump (the
table's upper bound, each chunk, each range end) with the values bound, so a chunk is
still one SELECT between LW and HW and the watermark rule holds for the rows it reads.

A value is kept as text, as the user gave it (numbers as their JSON text); the database
reads it as the column's type (PostgreSQL: a CAST to the column's type; MySQL: the
column's parameter parser), and a value the type cannot hold refuses the request.
SQL's three-valued logic applies: ``!=``, ``<`` and ``not in`` never match NULL (use
``is null``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from dblog_worker.errors import RequestRejected

MAX_CONDITIONS = 32
MAX_VALUES = 10_000  # of one ``in`` or ``not in``
MAX_VALUE_CHARS = 10_000
EXAMPLE = '[{"column": "region", "op": "in", "values": ["EU", "US"]}]'

KeyTexts = tuple[str, ...]


class Op(StrEnum):
    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    IN = "in"
    NOT_IN = "not in"
    IS_NULL = "is null"
    IS_NOT_NULL = "is not null"

    @property
    def arity(self) -> tuple[int, int]:
        """How many values the operator takes: (fewest, most)."""
        if self in (Op.IS_NULL, Op.IS_NOT_NULL):
            return 0, 0
        if self in (Op.IN, Op.NOT_IN):
            return 1, MAX_VALUES
        return 1, 1


# what people also type on a command line for the same operator
_SPELLINGS = {"==": Op.EQ, "<>": Op.NE}


def parse_op(text: object, *, typed: bool = False) -> Op:
    """An operator as JSON gives it (exactly one of :class:`Op`'s values), or as a person
    types it (``typed``: any case and spacing, ``==`` and ``<>`` too)."""
    spelled = " ".join(text.lower().split()) if typed and isinstance(text, str) else text
    op = _SPELLINGS.get(spelled) if typed and isinstance(spelled, str) else None
    op = op or next((o for o in Op if o.value == spelled), None)
    if op is None:
        raise RequestRejected(
            f"op must be one of {', '.join(o.value for o in Op)}, got {_shown(text)}")
    return op


@dataclass(frozen=True, slots=True)
class Condition:
    """``column op values``: one value, several (``in``, ``not in``) or none (``is null``)."""

    column: str
    op: Op
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column or "\x00" in self.column:
            raise RequestRejected(f"a condition's column must be a column name, got "
                                  f"{json.dumps(self.column)}")
        fewest, most = self.op.arity
        if not fewest <= len(self.values) <= most:
            wanted = "no value" if most == 0 else "one value" if most == 1 else \
                f"1 to {most} values"
            raise RequestRejected(f"{self.column} {self.op.value} takes {wanted}, got "
                                  f"{len(self.values)}")

    def describe(self) -> str:
        if not self.values:
            return f"{self.column} {self.op.value}"
        if self.op in (Op.IN, Op.NOT_IN):
            shown = ", ".join(json.dumps(v) for v in self.values[:5])
            more = f", ... ({len(self.values)} values)" if len(self.values) > 5 else ""
            return f"{self.column} {self.op.value} ({shown}{more})"
        return f"{self.column} {self.op.value} {json.dumps(self.values[0])}"

    def to_json(self) -> dict[str, object]:
        """As the HTTP API takes it: ``value``, ``values`` (in, not in) or neither."""
        document: dict[str, object] = {"column": self.column, "op": self.op.value}
        if self.op.arity[1] > 1:
            document["values"] = list(self.values)
        elif self.values:
            document["value"] = self.values[0]
        return document


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Conditions a row must all meet, and a primary-key range (each end included)."""

    conditions: tuple[Condition, ...] = ()
    from_key: KeyTexts | None = None
    to_key: KeyTexts | None = None

    def __post_init__(self) -> None:
        if len(self.conditions) > MAX_CONDITIONS:
            raise RequestRejected(f"at most {MAX_CONDITIONS} conditions, got "
                                  f"{len(self.conditions)}")
        if (self.from_key is not None and self.to_key is not None
                and len(self.from_key) != len(self.to_key)):
            raise RequestRejected(f"from_key has {len(self.from_key)} value(s) but to_key "
                                  f"{len(self.to_key)}: both are keys of one table")

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.column for c in self.conditions))

    @property
    def key_range(self) -> bool:
        return self.from_key is not None or self.to_key is not None

    def describe(self) -> str:
        """For people: ``region in ("EU", "US") AND keys from ["100"] to ["200"]``."""
        parts = [c.describe() for c in self.conditions]
        if self.from_key is not None:
            parts.append(f"key >= {json.dumps(list(self.from_key))}")
        if self.to_key is not None:
            parts.append(f"key <= {json.dumps(list(self.to_key))}")
        return " AND ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {"where": [c.to_json() for c in self.conditions],
                "from_key": None if self.from_key is None else list(self.from_key),
                "to_key": None if self.to_key is None else list(self.to_key)}

    @classmethod
    def of(cls, where: object = None, from_key: object = None,
           to_key: object = None) -> RowFilter | None:
        """A filter from a front end's JSON-like values, or None if all are empty.

        ``where``: a list of conditions, each ``{"column", "op", "value"}`` (or
        ``"values"``: a list) or a list of words (``["region", "in", "EU", "US"]``, as
        ``dblog dump --where`` gives them). A key: a number, a string, or a list of them
        (one per key column)."""
        if where is None or where == []:
            conditions: tuple[Condition, ...] = ()
        elif isinstance(where, Sequence) and not isinstance(where, str):
            conditions = tuple(_condition(item, i) for i, item in enumerate(where))
        else:
            raise RequestRejected(f"where must be a list of conditions such as {EXAMPLE}")
        first, last = _key(from_key, "from_key"), _key(to_key, "to_key")
        if not conditions and first is None and last is None:
            return None
        return cls(conditions, first, last)

    @classmethod
    def from_json(cls, text: str) -> RowFilter:
        """The filter a request's record holds (ValueError, saying what is wrong)."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError("is not JSON") from None
        if not isinstance(data, dict) or set(data) - {"where", "from_key", "to_key"}:
            raise ValueError("is not an object of where, from_key and to_key")
        try:
            made = cls.of(data.get("where"), data.get("from_key"), data.get("to_key"))
        except RequestRejected as exc:
            raise ValueError(str(exc)) from None
        if made is None:
            raise ValueError("is empty")
        return made


def _condition(item: object, index: int) -> Condition:
    where = f"condition #{index + 1}"
    if isinstance(item, Mapping):
        unknown = set(item) - {"column", "op", "value", "values"}
        if unknown:
            raise RequestRejected(f"{where} has unknown field(s) {', '.join(sorted(unknown))}:"
                                  " give column, op and value (or values)")
        if "value" in item and "values" in item:
            raise RequestRejected(f"{where}: give value or values, not both")
        op = parse_op(item.get("op"))
        if "values" in item:
            raw = item["values"]
            if isinstance(raw, str) or not isinstance(raw, Sequence):
                raise RequestRejected(f"{where}: values must be a list")
            values = tuple(_value(v, where) for v in raw)
        else:
            values = () if "value" not in item else (_value(item["value"], where),)
        column = item.get("column")
        if not isinstance(column, str):
            raise RequestRejected(f"{where}: column must be a column name, got "
                                  f"{_shown(column)}")
        return Condition(column, op, values)
    if isinstance(item, Sequence) and not isinstance(item, str):
        return _words([_word(w, where) for w in item], where)
    raise RequestRejected(f"{where} must be an object such as "
                          '{"column": "region", "op": "=", "value": "EU"}')


def _words(words: list[str], where: str) -> Condition:
    """``column op value...``: the operator is the longest that matches after the column."""
    if len(words) < 2:
        raise RequestRejected(f"{where} needs a column and an operator, e.g. "
                              "region = EU, or deleted_at is null")
    for take in (3, 2, 1):
        spelled = " ".join(w.lower() for w in words[1:1 + take])
        if len(words) > take and (spelled in _SPELLINGS or spelled in {o.value for o in Op}):
            return Condition(words[0], parse_op(spelled, typed=True), tuple(words[1 + take:]))
    raise RequestRejected(f"{where}: {json.dumps(words[1])} is not an operator; use one of "
                          f"{', '.join(o.value for o in Op)}")


def _word(word: object, where: str) -> str:
    if not isinstance(word, str | int | float) or isinstance(word, bool):
        raise RequestRejected(f"{where}: {_shown(word)} is not a column, operator or value")
    return word if isinstance(word, str) else json.dumps(word)


def _value(value: object, where: str) -> str:
    if value is None:
        raise RequestRejected(f"{where}: a value is null; use the op is null or is not null")
    if isinstance(value, bool):
        raise RequestRejected(f"{where}: {json.dumps(value)} is a JSON boolean; give it as the "
                              'column reads it: "true"/"false" (PostgreSQL boolean) or 1/0 '
                              "(MySQL BOOL)")
    if not isinstance(value, str | int | float):
        raise RequestRejected(f"{where}: {_shown(value)} is not a number or a string")
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) > MAX_VALUE_CHARS or "\x00" in text:
        raise RequestRejected(f"{where}: a value is longer than {MAX_VALUE_CHARS} characters "
                              "or holds a NUL")
    return text


def _key(value: object, name: str) -> KeyTexts | None:
    if value is None:
        return None
    parts = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    if not parts:
        raise RequestRejected(f"{name} is an empty list: give the key's value, or one value "
                              "per key column")
    return tuple(_value(part, name) for part in parts)


def _shown(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def key_argument(text: str) -> object:
    """A key as ``--from-key``/``--to-key`` give it: JSON (``10``, ``[1, "a"]``), else the
    text itself (``--from-key abc``)."""
    try:
        return json.loads(text)
    except ValueError:
        return text
