"""Foreign-key cascades the log does not carry: which tables they reach, and the events
that stand for them.

InnoDB (MariaDB, and MySQL unless it handles foreign keys in its SQL layer) applies
``ON DELETE CASCADE``, ``ON DELETE SET NULL``, ``ON UPDATE CASCADE`` and ``ON UPDATE SET
NULL`` inside the engine: the binary log holds the parent's row event and nothing of the
child rows. Knowing the foreign keys, the worker derives what a parent row change did:

* **Level 1.** A captured child whose foreign key references a table whose row events the
  log carries (captured or not) gets a *foreign-key action event* (``op`` ``f``) at the
  parent row's position: "the rows whose foreign-key columns hold these values are deleted"
  (``ON DELETE CASCADE``), "... have them set to null" (``SET NULL``) or "... set to these
  values" (``ON UPDATE CASCADE``). Its keys are not known; consumers apply it by predicate.
* **Level 2 and more.** A cascade into a table whose rows are themselves changed by a
  cascade (``p → c → g``: the keys of the ``c`` rows are known to nobody) cannot be
  derived: the captured tables it reaches are *pruned*: a pruning dump reads them whole and
  lands a prune event (``op`` ``p``) that removes every row no event since its start wrote.
  So are the children of a foreign key whose values the database compares otherwise than
  byte for byte (a case-insensitive or PAD SPACE collation): the derived event matches the
  same bytes only; and the children whose primary key an update cascades into (the rows'
  keys change, which an event without keys cannot say).

Row images, predicates and new values are canonical JSON (see the kinds' ``values.py``):
this module works on the JSON *fragments* of values, as written, so a match compares the
same bytes the images hold and a changed row keeps every other value's bytes. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from json.encoder import encode_basestring

__all__ = [
    "Action",
    "CascadePlan",
    "ForeignKey",
    "Rule",
    "action_images",
    "apply_actions",
    "parse_actions",
    "parse_prune",
    "prune_image",
    "row_fragments",
]

NULL = "null"
_DECODER = json.JSONDecoder()
# the JSON string scanner json itself uses (C): (text, index after the quote) -> (str, end)
scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class Rule(StrEnum):
    """What a foreign key does to its child rows when the parent row is deleted or its
    referenced values change (``information_schema``'s words)."""

    CASCADE = "CASCADE"
    SET_NULL = "SET NULL"
    NO_ACTION = "NO ACTION"  # also RESTRICT and SET DEFAULT (which InnoDB refuses): nothing

    @classmethod
    def of(cls, text: str) -> Rule:
        upper = text.strip().upper()
        return cls(upper) if upper in (cls.CASCADE, cls.SET_NULL) else cls.NO_ACTION

    @property
    def acts(self) -> bool:
        return self is not Rule.NO_ACTION


@dataclass(frozen=True, slots=True)
class ForeignKey:
    """One foreign key: ``child(columns)`` references ``parent(referenced)``; ``exact``:
    the database compares its values byte for byte (numbers, dates, binary strings,
    ``*_nopad_bin`` collations), so a derived event matches exactly the rows it did;
    ``in_key``: its columns are part of the child's primary key (an update that cascades
    changes the rows' keys)."""

    name: str
    child: str  # database.table
    columns: tuple[str, ...]
    parent: str
    referenced: tuple[str, ...]
    on_delete: Rule
    on_update: Rule
    exact: bool = True
    in_key: bool = False

    def derivable(self, deleted: bool) -> bool:
        """Whether an event can say what it does to the child rows: not when it changes
        their primary key (an event names no key)."""
        return deleted or not self.in_key

    def pruned(self, deleted: bool) -> bool:
        """Whether its child is pruned after it acts: no event can say all it did (it
        changes the rows' keys, or the database matched by collation, not by bytes)."""
        return not self.exact or not self.derivable(deleted)

    @property
    def acts(self) -> bool:
        return self.on_delete.acts or self.on_update.acts

    def rule(self, deleted: bool) -> Rule:
        return self.on_delete if deleted else self.on_update


@dataclass(frozen=True, slots=True)
class Action:
    """What one foreign key did to one parent row's children: the rows whose ``match``
    columns hold those values (JSON fragments) are deleted (``values`` None) or get
    ``values``."""

    match: tuple[tuple[str, str], ...]
    values: tuple[tuple[str, str], ...] | None

    @property
    def deletes(self) -> bool:
        return self.values is None

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.match)


# -- what the foreign keys reach ------------------------------------------------------------


_Change = tuple[str, frozenset[str] | None]  # (table, its changed columns; None: deleted)


@dataclass(frozen=True)
class CascadePlan:
    """The acting foreign keys among the tables a source can see, and the captured tables.

    ``parents``: the tables whose row events the worker must decode (every parent of an
    acting foreign key on the way to a captured table). :meth:`derive` gives a parent row
    change's level-1 events and the captured tables it reaches where none can be derived."""

    keys: tuple[ForeignKey, ...]
    captured: frozenset[str]
    _by_parent: dict[str, tuple[ForeignKey, ...]] = field(init=False, repr=False,
                                                          compare=False)
    _reached: dict[tuple[str, frozenset[str] | None, tuple[ForeignKey, ...]], frozenset[str]] = (
        field(init=False, repr=False, compare=False))

    def __post_init__(self) -> None:
        by_parent: dict[str, list[ForeignKey]] = {}
        for key in sorted((k for k in self.keys if k.acts), key=lambda k: (k.child, k.name)):
            by_parent.setdefault(key.parent, []).append(key)
        object.__setattr__(self, "_by_parent", {p: tuple(ks) for p, ks in by_parent.items()})
        object.__setattr__(self, "_reached", {})

    @property
    def parents(self) -> frozenset[str]:
        """Tables whose changes derive events or prunes: parents of acting foreign keys."""
        return frozenset(self._by_parent)

    def children(self, parent: str) -> tuple[ForeignKey, ...]:
        return self._by_parent.get(parent, ())

    def derive(self, parent: str, before: str | None, after: str | None
               ) -> tuple[dict[str, list[Action]], frozenset[str]]:
        """What one row change of ``parent`` did to its children (canonical JSON images: a
        delete has no ``after``, an insert no ``before``, which changes nothing): per
        captured child, its level-1 actions, deletes first (the order the merge applies
        them); and the captured tables it can change where no event can say how: two
        foreign keys or more away, or through one that does not compare byte for byte."""
        if before is None or parent not in self._by_parent:
            return {}, frozenset()
        old = row_fragments(before)
        new = None if after is None else row_fragments(after)
        changed = None if new is None else frozenset(
            c for c, v in old.items() if new.get(c, v) != v)
        acting = tuple(  # the keys whose children this row can have, and that act now
            key for key in self._by_parent[parent]
            if NULL not in (old.get(c, NULL) for c in key.referenced)
            and (changed is None or changed.intersection(key.referenced)))
        actions: dict[str, list[Action]] = {}
        for key in acting:
            if key.child in self.captured and key.derivable(new is None):
                action = _action(key, old, new)
                if action is not None:
                    actions.setdefault(key.child, []).append(action)
        for found in actions.values():
            found.sort(key=lambda a: not a.deletes)
        return actions, self._reach(parent, changed, acting) if acting else frozenset()

    def _reach(self, parent: str, changed: frozenset[str] | None,
               keys: tuple[ForeignKey, ...]) -> frozenset[str]:
        found = self._reached.get((parent, changed, keys))
        if found is None:
            found = self._reached[(parent, changed, keys)] = _reach(self, parent, changed,
                                                                    keys)
        return found

    def reached(self) -> dict[str, frozenset[str]]:
        """For preflight: per parent, the captured tables a delete of one of its rows
        prunes (see :meth:`derive`)."""
        return {parent: self._reach(parent, None, keys)
                for parent, keys in self._by_parent.items()}


def _effects(keys: Iterable[ForeignKey], change: _Change) -> list[tuple[ForeignKey, _Change]]:
    """The child changes a change of a table's rows makes through ``keys`` (those whose
    parent it is), foreign key by foreign key."""
    _, changed = change
    effects = []
    for key in keys:
        if changed is not None and not changed.intersection(key.referenced):
            continue
        rule = key.rule(changed is None)
        if not rule.acts:
            continue
        deleted = rule is Rule.CASCADE and changed is None
        effects.append((key, (key.child, None if deleted else frozenset(key.columns))))
    return effects


def _reach(plan: CascadePlan, parent: str, changed: frozenset[str] | None,
           keys: tuple[ForeignKey, ...]) -> frozenset[str]:
    pruned: set[str] = set()
    seen: set[_Change] = set()
    frontier = []
    for key, child in _effects(keys, (parent, changed)):
        if key.pruned(changed is None) and key.child in plan.captured:
            pruned.add(key.child)
        frontier.append(child)
    while frontier:  # two foreign keys away or more: no event can say which rows
        change = frontier.pop()
        if change in seen:
            continue
        seen.add(change)
        for key, child in _effects(plan.children(change[0]), change):
            if key.child in plan.captured:
                pruned.add(key.child)
            frontier.append(child)
    return frozenset(pruned)


def _action(key: ForeignKey, old: Mapping[str, str], new: Mapping[str, str] | None
            ) -> Action | None:
    values = [old.get(column, NULL) for column in key.referenced]
    if NULL in values:  # a null never references a row
        return None
    match = tuple(zip(key.columns, values, strict=True))
    if new is None:
        if key.on_delete is Rule.CASCADE:
            return Action(match, None)
        if key.on_delete is Rule.SET_NULL:
            return Action(match, tuple((c, NULL) for c in key.columns))
        return None
    after = [new.get(column, NULL) for column in key.referenced]
    if after == values:
        return None
    if key.on_update is Rule.CASCADE:
        return Action(match, tuple(zip(key.columns, after, strict=True)))
    if key.on_update is Rule.SET_NULL:
        return Action(match, tuple((c, NULL) for c in key.columns))
    return None


# -- the events' images ---------------------------------------------------------------------


def _object(members: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{encode_basestring(n)}:{v}" for n, v in members) + "}"


def action_images(actions: Sequence[Action]) -> tuple[str, str]:
    """The ``before`` and ``after`` of a foreign-key action event: a JSON array of the
    actions' predicates (objects of column → value) and one of what each does (null:
    delete; an object: the columns' new values)."""
    before = "[" + ",".join(_object(a.match) for a in actions) + "]"
    after = "[" + ",".join(NULL if a.values is None else _object(a.values)
                           for a in actions) + "]"
    return before, after


def parse_actions(before: str, after: str) -> list[Action]:
    """The actions of a foreign-key action event's images; ValueError if malformed."""
    matches, values = _array(before), _array(after)
    if len(matches) != len(values) or not matches:
        raise ValueError("a foreign-key action event needs as many predicates as actions")
    actions = []
    for match, value in zip(matches, values, strict=True):
        if match is None or not match:
            raise ValueError("a foreign-key action's predicate is an object of columns")
        actions.append(Action(tuple(match), None if value is None else tuple(value)))
    return actions


def prune_image(older_than: str) -> str:
    """The ``before`` of a prune event: every row whose latest event is before this
    position (48 hex digits) is gone."""
    return _object([("older_than", json.dumps(older_than))])


def parse_prune(before: str) -> str:
    """The position a prune event's ``before`` names; ValueError if malformed."""
    members = dict(_members(before, 0)[0])
    position = json.loads(members.get("older_than", NULL))
    if not isinstance(position, str) or len(position) != 48:
        raise ValueError(f"a prune event names a position of 48 hex digits, got {before!r}")
    return position


# -- fragments ------------------------------------------------------------------------------


def row_fragments(row: str) -> dict[str, str]:
    """A canonical JSON object as column → the JSON text of its value, as written."""
    return dict(_row_members(row))


def _row_members(row: str) -> list[tuple[str, str]]:
    return _members(row, 0)[0]


def _members(text: str, index: int) -> tuple[list[tuple[str, str]], int]:
    """The members of the JSON object at ``text[index]`` (no whitespace between tokens, as
    canonical JSON is written), each value as its text; and the index after it."""
    if text[index:index + 1] != "{":
        raise ValueError(f"not a JSON object at {index}: {text[index:index + 20]!r}")
    index += 1
    members: list[tuple[str, str]] = []
    if text[index:index + 1] == "}":
        return members, index + 1
    while True:
        if text[index:index + 1] != '"':
            raise ValueError(f"not a JSON object member at {index}: {text[index:index + 20]!r}")
        name, index = scanstring(text, index + 1)
        if text[index:index + 1] != ":":
            raise ValueError(f"no ':' after member {name!r}")
        _, end = _DECODER.raw_decode(text, index + 1)
        members.append((name, text[index + 1:end]))
        index = end
        if text[index:index + 1] == "}":
            return members, index + 1
        if text[index:index + 1] != ",":
            raise ValueError(f"no ',' after member {name!r}")
        index += 1


def _array(text: str) -> list[list[tuple[str, str]] | None]:
    """A JSON array of objects (or nulls), each object as its members."""
    if text[:1] != "[":
        raise ValueError(f"not a JSON array: {text[:20]!r}")
    items: list[list[tuple[str, str]] | None] = []
    index = 1
    if text[index:index + 1] == "]":
        return items
    while True:
        if text.startswith(NULL, index):
            items.append(None)
            index += len(NULL)
        else:
            members, index = _members(text, index)
            items.append(members)
        if text[index:index + 1] == "]":
            if index + 1 != len(text):
                raise ValueError("text after the JSON array")
            return items
        if text[index:index + 1] != ",":
            raise ValueError(f"no ',' in the JSON array at {index}")
        index += 1


def apply_actions(row: str, events: Sequence[Sequence[Action]]) -> str | None:
    """``row`` (a canonical JSON object) after foreign-key action events, in order: None
    when one deletes it, else the row with the new values written in place (every other
    value keeps its bytes); ``row`` itself when none matches."""
    members = _row_members(row)
    changed = False
    for actions in events:
        values = dict(members)
        matched = [a for a in actions if all(values.get(c) == v and v != NULL
                                             for c, v in a.match)]
        if not matched:
            continue
        if any(a.deletes for a in matched):
            return None
        new = {c: v for a in matched for c, v in a.values or ()}
        members = [(name, new.get(name, value)) for name, value in members]
        changed = True
    return _object(members) if changed else row
