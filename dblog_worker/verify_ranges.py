"""The range queries of ``dblog verify`` on one side's table (see :mod:`dblog_worker.verify_sql`):
count and checksum sum per bucket, boundaries, split keys, rows and key lookups."""

from __future__ import annotations

from collections.abc import Sequence

from dblog_worker.verify_sql import TABLE_ALIAS, SideSql, sql_of


def _from(side: SideSql) -> str:
    return f"{side.table} AS {TABLE_ALIAS}"


def _md5(side: SideSql) -> str:
    return sql_of(side.dialect).md5(side.row)


def _checksum(side: SideSql) -> str:
    return sql_of(side.dialect).checksum(side.row)


def _compare(side: SideSql, operator: str) -> str:
    """``(key) <operator> (bound)`` for ``>`` or ``<=``."""
    if len(side.order) == 1:
        return f"{side.order[0]} {operator} {side.binds[0]}"
    return sql_of(side.dialect).compare_keys(side.order, side.binds, operator)


def _bound_params(side: SideSql, operator: str, bound: Sequence[object]) -> list[object]:
    """The parameters of :func:`_compare` for one bound (its key's bind parameters)."""
    if len(bound) == 1:
        return list(bound)
    return sql_of(side.dialect).bound_params(operator, bound)


def _condition(side: SideSql, lower: bool, upper: bool) -> str:
    parts = ([_compare(side, ">")] if lower else []) + ([_compare(side, "<=")] if upper else [])
    return " WHERE " + " AND ".join(parts) if parts else ""


def condition_params(side: SideSql, lower: Sequence[object] | None,
                     upper: Sequence[object] | None) -> list[object]:
    """The parameters of a range ``(lower, upper]``, either end None for open."""
    params = _bound_params(side, ">", lower) if lower is not None else []
    return params + (_bound_params(side, "<=", upper) if upper is not None else [])


def summary_sql(side: SideSql, *, lower: bool, upper: bool, buckets: int) -> str:
    """Row count and checksum sum per bucket of a range, split at ``buckets - 1`` bounds:
    rows ``(bucket, count, sum)``, only buckets that have rows.  Parameters:
    :func:`summary_params`."""
    if buckets > 1:
        whens = " ".join(f"WHEN {_compare(side, '<=')} THEN {i}" for i in range(buckets - 1))
        bucket = f"CASE {whens} ELSE {buckets - 1} END"
    else:
        bucket = "0"
    return (f"SELECT b, count(*), sum(h) FROM (SELECT {bucket} AS b, {_checksum(side)} AS h "
            f"FROM {_from(side)}{_condition(side, lower, upper)}) AS s GROUP BY b")


def summary_params(side: SideSql, lower: Sequence[object] | None,
                   bounds: Sequence[Sequence[object]],
                   upper: Sequence[object] | None) -> list[object]:
    params = [p for bound in bounds for p in _bound_params(side, "<=", bound)]
    return params + condition_params(side, lower, upper)


def boundary_sql(side: SideSql, *, lower: bool) -> str:
    """The key ``offset + 1`` rows after ``lower``: parameters the lower bound's
    (:func:`condition_params`), then the offset."""
    return (f"SELECT {', '.join(side.keys)} FROM {_from(side)}{_condition(side, lower, False)} "
            f"ORDER BY {', '.join(side.order)} LIMIT 1 OFFSET %s")


def split_sql(side: SideSql, *, lower: bool, upper: bool) -> str:
    """Every ``step``-th key of a range, at most ``limit``: parameters the range's, then
    step and limit."""
    sql = sql_of(side.dialect)
    names = [sql.quote(f"k{i}") for i in range(len(side.keys))]
    selected = ", ".join(f"{k} AS {n}" for k, n in zip(side.keys, names, strict=True))
    step = sql.step_bind
    return (f"SELECT {', '.join(names)} FROM (SELECT {selected}, row_number() OVER "
            f"(ORDER BY {', '.join(side.order)}) AS rn FROM {_from(side)}"
            f"{_condition(side, lower, upper)}) AS s WHERE mod(rn, {step}) = 0 "
            "ORDER BY rn LIMIT %s")


def rows_sql(side: SideSql, *, lower: bool, upper: bool) -> str:
    """The normalized key and the md5 of each row of a range, in key order."""
    return (f"SELECT {', '.join(side.keys)}, {_md5(side)} FROM {_from(side)}"
            f"{_condition(side, lower, upper)} ORDER BY {', '.join(side.order)}")


def lookup_sql(side: SideSql, count: int) -> str:
    """:func:`rows_sql` of ``count`` given keys: parameters :func:`lookup_params`."""
    where = sql_of(side.dialect).lookup_where(side.order, side.binds, count)
    return f"SELECT {', '.join(side.keys)}, {_md5(side)} FROM {_from(side)} WHERE {where}"


def lookup_params(keys: Sequence[Sequence[object]]) -> list[object]:
    return [p for key in keys for p in key]


# --- a table with masked columns: each row's values, for Python to checksum ---------------


def _bucket(side: SideSql, buckets: int) -> str:
    if buckets <= 1:
        return "0"
    whens = " ".join(f"WHEN {_compare(side, '<=')} THEN {i}" for i in range(buckets - 1))
    return f"CASE {whens} ELSE {buckets - 1} END"


def values_sql(side: SideSql, *, lower: bool, upper: bool, buckets: int = 1) -> str:
    """Each row of a range: its bucket (as :func:`summary_sql` splits the range), its
    normalized key, and its values (``SideSql.values``), in key order. Parameters: those of
    :func:`summary_params`."""
    return (f"SELECT {_bucket(side, buckets)}, {', '.join(side.keys)}, "
            f"{', '.join(side.values)} FROM {_from(side)}{_condition(side, lower, upper)} "
            f"ORDER BY {', '.join(side.order)}")


def lookup_values_sql(side: SideSql, count: int) -> str:
    """:func:`values_sql` of ``count`` given keys (bucket 0): parameters
    :func:`lookup_params`."""
    where = sql_of(side.dialect).lookup_where(side.order, side.binds, count)
    return (f"SELECT 0, {', '.join(side.keys)}, {', '.join(side.values)} FROM {_from(side)} "
            f"WHERE {where}")
