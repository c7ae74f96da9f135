r"""Which tables a source captures: names and patterns of ``source.tables``, and why.

The pattern language
====================

An entry of ``source.tables`` (or ``source.exclude_tables``, or a table of
``[source.columns]``) is ``schema.table`` (``database.table``), split at its first dot: a
schema or database name cannot contain a dot, a table name can. Each of the two parts is
matched on its own, against the whole name, character by character (case-sensitive):

=========  ======================================================================
``*``      any run of characters, none too
``?``      exactly one character
``[abc]``  one of the characters listed; ``[a-z]`` a range; ``[!abc]`` any other
           character; a ``]`` right after ``[`` or ``[!`` is one of the characters
``\``      the next character as itself: ``\*``, ``\?``, ``\[``, ``\]``, ``\\``
=========  ======================================================================

Nothing else is special. A backslash before any other character is an error (so an old
configuration that names a table with a backslash is refused, not silently read another
way), and so is a ``[`` never closed. An entry with no unescaped ``*``, ``?`` or ``[`` is a
*name*: it names one table (its escapes undone: ``shop.a\*b`` names table ``a*b``); a
name containing ``*``, ``?``, ``[``, ``]`` or ``\`` must be written escaped
(:func:`escape`). Column names of ``[source.columns]`` follow the same language.

A name and a pattern are held to different standards:

* a table *named* is captured whatever it is: preflight refuses to start capture if it
  does not exist, has no key, ... (a typo is the usual cause);
* a table a *pattern* matches is captured only if it can be: a table without a key (a
  primary key, a unique index on NOT NULL columns, or ``source.keys``), a partition (its
  rows are captured under its partitioned table's name), an unlogged table (PostgreSQL:
  its changes are not in the log), one whose REPLICA IDENTITY does not carry its key
  (PostgreSQL: published, its UPDATEs and DELETEs would fail), a table in the worker's
  own schema ``dblog``, one whose landing folder name would be too long, or one a rule of
  ``[source.columns]`` would mask the key of, is left out, and the selection says why.
  Patterns never look into the database's system schemas. What a pattern brings
  in never stops capture.

A table matched by ``source.exclude_tables`` is never captured (naming it in
``source.tables`` too is a configuration error).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from dblog_worker.names import WATERMARK_SCHEMA

__all__ = [
    "Candidate",
    "NamePattern",
    "PatternError",
    "Rescan",
    "Selection",
    "TablePattern",
    "TableSelector",
    "escape",
]

_SPECIAL = "*?["
_ESCAPABLE = "*?[]\\"


class PatternError(ValueError):
    """An entry that is not a valid name or pattern: the message says where and why."""

    def __init__(self, text: str, reason: str, separator: str = ": ") -> None:
        super().__init__(f"{text!r}{separator}{reason}")
        self.reason = reason


def escape(name: str) -> str:
    r"""``name`` written so that it names only itself: ``a*b`` → ``a\*b``."""
    return "".join("\\" + c if c in _ESCAPABLE else c for c in name)


@dataclass(frozen=True)
class NamePattern:
    """One part (a schema, a table or a column name) of an entry, compiled."""

    text: str  # as written
    literal: str | None  # the name, if the part has no wildcard
    regex: re.Pattern[str] | None

    @classmethod
    def parse(cls, text: str) -> NamePattern:
        pieces: list[str] = []
        literal: list[str] = []
        wild = False
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\\":
                if i + 1 == len(text) or text[i + 1] not in _ESCAPABLE:
                    raise PatternError(text, "a backslash escapes only *, ?, [, ] and \\ "
                                       "(write \\\\ for a backslash in a name)")
                pieces.append(re.escape(text[i + 1]))
                literal.append(text[i + 1])
                i += 2
            elif c == "*":
                pieces.append(".*")
                wild = True
                i += 1
            elif c == "?":
                pieces.append(".")
                wild = True
                i += 1
            elif c == "[":
                piece, i = _char_class(text, i)
                pieces.append(piece)
                wild = True
            else:
                pieces.append(re.escape(c))
                literal.append(c)
                i += 1
        if wild:
            return cls(text, None, re.compile("".join(pieces), re.DOTALL))
        return cls(text, "".join(literal), None)

    def matches(self, name: str) -> bool:
        if self.regex is None:
            return name == self.literal
        return self.regex.fullmatch(name) is not None


def _char_class(text: str, start: int) -> tuple[str, int]:
    """The regex of the class ``[...]`` at ``start``, and where the text goes on."""
    i = start + 1
    negate = i < len(text) and text[i] == "!"
    if negate:
        i += 1
    items: list[tuple[str, bool]] = []  # (character, whether it is an unescaped "-")
    while i < len(text):
        c = text[i]
        if c == "]" and items:
            return ("[^" if negate else "[") + _members(text, items) + "]", i + 1
        if c == "\\":
            if i + 1 == len(text) or text[i + 1] not in _ESCAPABLE:
                raise PatternError(text, "a backslash escapes only *, ?, [, ] and \\")
            items.append((text[i + 1], False))
            i += 2
        else:
            items.append((c, c == "-"))
            i += 1
    raise PatternError(text, "a [ is never closed (write \\[ for a [ in a name)")


def _members(text: str, items: Sequence[tuple[str, bool]]) -> str:
    """A class's members as a regex: ``a-z`` between two characters is a range."""
    members: list[str] = []
    k = 0
    while k < len(items):
        low = items[k][0]
        if k + 2 < len(items) and items[k + 1][1]:
            high = items[k + 2][0]
            if high < low:
                raise PatternError(text, f"the range {low}-{high} is empty")
            members.append(re.escape(low) + "-" + re.escape(high))
            k += 3
        else:
            members.append(re.escape(low))
            k += 1
    return "".join(members)


@dataclass(frozen=True)
class TablePattern:
    """An entry ``schema.table``: a name or a pattern, each part compiled."""

    text: str
    schema: NamePattern
    table: NamePattern

    @classmethod
    def parse(cls, text: str, form: str = "schema.table") -> TablePattern:
        schema, dot, table = text.partition(".")
        if not dot or not schema or not table:
            raise PatternError(text, f"must be qualified: {form} (split at the first dot: a "
                               "table name may contain dots, a schema or database name may "
                               "not)", " ")
        if _escaped_at_end(schema):
            raise PatternError(text, "a schema or database name cannot contain a dot")
        try:
            return cls(text, NamePattern.parse(schema), NamePattern.parse(table))
        except PatternError as exc:
            raise PatternError(text, exc.reason) from None

    @property
    def name(self) -> str | None:
        """The table it names, if it is not a pattern."""
        if self.schema.literal is None or self.table.literal is None:
            return None
        return f"{self.schema.literal}.{self.table.literal}"

    def matches(self, table: str) -> bool:
        schema, _, name = table.partition(".")
        return self.schema.matches(schema) and self.table.matches(name)


def _escaped_at_end(text: str) -> bool:
    return (len(text) - len(text.rstrip("\\"))) % 2 == 1


@dataclass(frozen=True, slots=True)
class Candidate:
    """A table of the source's catalog that a pattern may match (no system table)."""

    table: str  # schema.table
    key: tuple[str, ...] = ()  # its key's columns (tables.choose_key); () without one
    left_out: str | None = None  # why a pattern cannot capture it (a partition, unlogged)


@dataclass(frozen=True)
class Selection:
    """What the source captures now (table → why: the names in the order written, then
    the tables patterns matched, by name) and what patterns matched but it leaves out
    (table → why not, by name)."""

    captured: Mapping[str, str] = field(default_factory=dict)
    excluded: Mapping[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()  # tables named in source.tables that do not exist now

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self.captured)

    @property
    def existing(self) -> tuple[str, ...]:
        """The captured tables that exist now."""
        return tuple(t for t in self.captured if t not in self.missing)

    def to_json(self) -> dict[str, object]:
        return {"captured": dict(self.captured), "excluded": dict(self.excluded),
                "missing": list(self.missing)}


@dataclass(frozen=True)
class Rescan:
    """What a look at the catalog found: the selection now, and the tables that joined and
    left capture since the last look."""

    selection: Selection
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


class TableSelector:
    """``source.tables`` and ``source.exclude_tables``, parsed: which tables they capture.

    ``name_problem(table)`` says why a table a pattern matches cannot be captured by its
    name alone (a landing folder name too long), or None.
    """

    def __init__(self, tables: Sequence[str], exclude: Sequence[str] = (),
                 form: str = "schema.table",
                 name_problem: Callable[[str], str | None] = lambda table: None) -> None:
        self.entries = tuple(TablePattern.parse(t, form) for t in tables)
        self.exclusions = tuple(TablePattern.parse(t, form) for t in exclude)
        self._name_problem = name_problem
        self._verdicts: dict[str, tuple[bool, str]] = {}
        for entry in self.entries:
            name = entry.name
            if name is None:
                continue
            excluded_by = self._excluded_by(name)
            if excluded_by is not None:
                raise PatternError(entry.text, "it is named in source.tables and excluded by "
                                   f"{excluded_by.text!r} in source.exclude_tables: remove one")

    @cached_property
    def names(self) -> tuple[str, ...]:
        """The tables named (not matched by a pattern), in the order written."""
        return tuple(dict.fromkeys(e.name for e in self.entries if e.name is not None))

    @cached_property
    def has_patterns(self) -> bool:
        return any(e.name is None for e in self.entries)

    @cached_property
    def schemas(self) -> frozenset[str] | None:
        """The schemas (databases) an entry can match in; None if a schema is a pattern."""
        if any(e.schema.literal is None for e in self.entries):
            return None
        return frozenset(str(e.schema.literal) for e in self.entries)

    def _excluded_by(self, table: str) -> TablePattern | None:
        return next((x for x in self.exclusions if x.matches(table)), None)

    def _matched_by(self, table: str) -> TablePattern | None:
        return next((e for e in self.entries if e.matches(table)), None)

    def verdict(self, table: str) -> tuple[bool, str]:
        """Whether a table of this name is captured (if it exists, and, matched by a
        pattern, has a key and is no partition), and why (not); remembered."""
        known = self._verdicts.get(table)
        if known is None:
            known = self._verdicts[table] = self._verdict(table)
        return known

    def _verdict(self, table: str) -> tuple[bool, str]:
        if table in self.names:
            return True, "named in source.tables"
        entry = self._matched_by(table)
        if entry is None:
            return False, "matches no entry of source.tables"
        why = f"matches {entry.text!r}"
        excluded_by = self._excluded_by(table)
        if excluded_by is not None:
            return False, f"{why}, excluded by {excluded_by.text!r} (source.exclude_tables)"
        schema = table.partition(".")[0]
        if schema == WATERMARK_SCHEMA:
            return False, f"{why}, but schema {WATERMARK_SCHEMA} is the worker's own"
        problem = self._name_problem(table)
        if problem is not None:
            return False, f"{why}, but {problem}"
        return True, why

    def named(self, table: str) -> bool:
        return table in self.names

    def captures(self, table: str) -> bool:
        """Whether ``table`` is captured if it exists (pattern tables: with a key, not a
        partition)."""
        return self.verdict(table)[0]

    def select(self, candidates: Iterable[Candidate]) -> Selection:
        """The tables captured among ``candidates`` (the catalog's tables), with the
        named ones whether the catalog has them or not, and those left out."""
        captured: dict[str, str] = dict.fromkeys(self.names, "named in source.tables")
        excluded: dict[str, str] = {}
        candidates = list(candidates)
        found = {c.table for c in candidates}
        missing = tuple(name for name in self.names if name not in found)
        for name in missing:
            captured[name] = "named in source.tables; it does not exist now"
        for candidate in candidates:
            table = candidate.table
            if table in captured:
                continue
            if self._matched_by(table) is None:
                continue  # not of interest: no entry matches it
            take, why = self.verdict(table)
            if take and candidate.left_out is not None:
                take, why = False, f"{why}, but {candidate.left_out}"
            elif take and not candidate.key:
                take, why = False, (f"{why}, but it has no primary key nor unique index on "
                                    "NOT NULL columns (name its key in source.keys)")
            (captured if take else excluded)[table] = why
        named = {t: captured.pop(t) for t in self.names}
        return Selection({**named, **dict(sorted(captured.items()))},
                         dict(sorted(excluded.items())), missing)
