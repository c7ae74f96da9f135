"""What the PostgreSQL source reads from the catalog, and the checks of ``dblog preflight``.

Every problem found is a :class:`Problem` that says what is wrong and the SQL (or
setting) that fixes it; the worker refuses to start while any remains.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import psycopg

from dblog_worker.names import split_table
from dblog_worker.pg.encoders import BUILTIN_TYPES, PgType
from dblog_worker.pg.queries import TableShape, qualified, quote_ident
from dblog_worker.source import Problem
from dblog_worker.table_patterns import Candidate
from dblog_worker.tables import WATERMARK_SCHEMA as SCHEMA
from dblog_worker.tables import UniqueIndex, choose_key

WATERMARK_TABLE = "watermark"
WATERMARK_DDL = (
    f"CREATE TABLE {SCHEMA}.{WATERMARK_TABLE} "
    "(source text PRIMARY KEY, value text NOT NULL, written_at timestamptz NOT NULL)"
)


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A captured table as the catalog describes it now."""

    schema: str
    name: str
    oid: int
    columns: tuple[str, ...]  # the captured columns: what the log carries
    type_oids: tuple[int, ...]
    key_columns: tuple[str, ...]  # the table's key: see choose_key
    key_types: tuple[str, ...]
    replica_identity: str
    # what ``SELECT *`` reads: every column, generated ones too, in order
    star: tuple[str, ...] = ()
    star_oids: tuple[int, ...] = ()
    star_types: tuple[str, ...] = ()  # format_type(atttypid, NULL) of each
    partitioned: bool = False
    key_from: str = "primary key"  # "primary key", "unique index <name>", "source.keys"
    nullable: tuple[str, ...] = ()  # the columns without NOT NULL
    identity: tuple[str, ...] = ()  # the columns the log's old key carries (d, i)
    # STORED generated columns: (name, format_type with its modifier, expression)
    generated: tuple[tuple[str, str, str], ...] = ()

    @property
    def table(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def shape(self) -> TableShape:
        return TableShape(self.schema, self.name, self.key_columns, self.key_types)

    @property
    def star_index(self) -> tuple[int, ...]:
        """Where each captured column is among the columns ``SELECT *`` reads."""
        return tuple(self.star.index(c) for c in self.columns)

    @property
    def key_in_log(self) -> bool:
        """Whether the log's old rows (updates, deletes) carry the key's values: the
        identity is FULL, or its index (the primary key for DEFAULT) is the key."""
        return self.replica_identity == "f" or (
            self.replica_identity in ("d", "i") and bool(self.identity)
            and set(self.identity) == set(self.key_columns))


# A unique index the key can be: valid, not deferred, not partial, on plain columns.
_UNIQUE_SQL = (
    "SELECT c.relname, i.indisprimary, i.indisreplident, "
    "array_agg(a.attname ORDER BY k.ord), bool_and(a.attnotnull) "
    "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
    "WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid AND i.indimmediate "
    "AND i.indpred IS NULL AND i.indexprs IS NULL AND k.ord <= i.indnkeyatts "
    "GROUP BY c.relname, i.indisprimary, i.indisreplident"
)


def load_table(conn: psycopg.Connection[tuple[object, ...]], table: str,
               configured: Sequence[str] | None = None) -> TableInfo | None:
    """The table's columns and key (``configured``: the columns source.keys names), or
    None if there is no such table."""
    schema, name = split_table(table)
    row = conn.execute(
        "SELECT c.oid, c.relkind, c.relreplident FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema, name),
    ).fetchone()
    if row is None:
        return None
    oid = int(str(row[0]))
    every = conn.execute(
        "SELECT a.attname, a.atttypid::int, a.attgenerated <> '', "
        "format_type(a.atttypid, NULL), a.attnotnull, format_type(a.atttypid, a.atttypmod), "
        "pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a "
        "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        "AND a.attgenerated <> '' "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (oid,),
    ).fetchall()
    columns = [c for c in every if not c[2]]  # the log does not carry generated columns
    indexes = [UniqueIndex(str(n), bool(p), bool(r), _texts(cols), bool(nn))
               for n, p, r, cols, nn in conn.execute(_UNIQUE_SQL, (oid,)).fetchall()]
    key, key_from = choose_key(indexes, configured)
    types = {str(c[0]): str(c[3]) for c in every}
    identity = str(row[2])
    carried = [i.columns for i in indexes
               if (identity == "d" and i.primary) or (identity == "i" and i.identity)]
    return TableInfo(
        schema=schema,
        name=name,
        oid=oid,
        columns=tuple(str(c[0]) for c in columns),
        type_oids=tuple(int(str(c[1])) for c in columns),
        key_columns=key,
        key_types=tuple(types.get(k, "text") for k in key),
        replica_identity=identity,
        star=tuple(str(c[0]) for c in every),
        star_oids=tuple(int(str(c[1])) for c in every),
        star_types=tuple(str(c[3]) for c in every),
        partitioned=str(row[1]) == "p",
        key_from=key_from,
        nullable=tuple(str(c[0]) for c in every if not c[4]),
        identity=carried[0] if carried else (),
        generated=tuple((str(c[0]), str(c[5]), str(c[6])) for c in every if c[2]),
    )


_SCHEMAS_OF_INTEREST = (
    "c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)' "
    "AND (%s::text[] IS NULL OR n.nspname = ANY(%s::text[]))"
)
_CANDIDATES_SQL = (
    "SELECT c.oid::int, n.nspname, c.relname, c.relpersistence = 'u', c.relreplident, "
    "CASE WHEN c.relispartition THEN (SELECT rn.nspname || '.' || r.relname FROM pg_class r "
    "JOIN pg_namespace rn ON rn.oid = r.relnamespace WHERE r.oid = pg_partition_root(c.oid)) "
    "END, "
    # a partitioned table's partitions whose identity is not FULL, and of those the ones
    # whose identity is not DEFAULT with a primary key (as partition_problems counts them)
    "(SELECT count(*) FROM pg_partition_tree(c.oid) AS t JOIN pg_class l ON l.oid = t.relid "
    "WHERE c.relkind = 'p' AND t.isleaf AND l.relreplident <> 'f'), "
    "(SELECT count(*) FROM pg_partition_tree(c.oid) AS t JOIN pg_class l ON l.oid = t.relid "
    "WHERE c.relkind = 'p' AND t.isleaf AND l.relreplident <> 'f' AND NOT ("
    "l.relreplident = 'd' AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = l.oid "
    "AND i.indisprimary))) "
    f"FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_SCHEMAS_OF_INTEREST}"
)
# _UNIQUE_SQL of every table _CANDIDATES_SQL lists
_CANDIDATE_INDEXES_SQL = (
    "SELECT i.indrelid::int, x.relname, i.indisprimary, i.indisreplident, "
    "array_agg(a.attname ORDER BY k.ord), bool_and(a.attnotnull) "
    "FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid "
    "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
    "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
    "WHERE i.indisunique AND i.indisvalid AND i.indimmediate "
    "AND i.indpred IS NULL AND i.indexprs IS NULL AND k.ord <= i.indnkeyatts "
    f"AND {_SCHEMAS_OF_INTEREST} "
    "GROUP BY i.indrelid, x.relname, i.indisprimary, i.indisreplident"
)


def candidates(conn: psycopg.Connection[tuple[object, ...]],
               schemas: Iterable[str] | None,
               keys: Mapping[str, Sequence[str]] | None = None) -> list[Candidate]:
    """The tables patterns may match (those of ``schemas``, if given): ordinary and
    partitioned tables out of the system schemas, each with its key (``keys``: those
    source.keys names); a partition, an unlogged table, or one whose replica identity
    does not carry its key (published, its UPDATEs and DELETEs would fail) says why a
    pattern leaves it out."""
    names = None if schemas is None else sorted(schemas)
    indexes: dict[int, list[UniqueIndex]] = {}
    for oid, index, primary, identity, columns, not_null in conn.execute(
            _CANDIDATE_INDEXES_SQL, (names, names)):
        indexes.setdefault(int(str(oid)), []).append(
            UniqueIndex(str(index), bool(primary), bool(identity), _texts(columns),
                        bool(not_null)))
    found = []
    for oid, schema, name, unlogged, identity, root, not_full, without_pk in conn.execute(
            _CANDIDATES_SQL, (names, names)):
        table = f"{schema}.{name}"
        own = indexes.get(int(str(oid)), [])
        key, key_from = choose_key(own, (keys or {}).get(table))
        left_out = None
        if root is not None:
            left_out = (f"it is a partition of {root} (its rows are captured under that "
                        "table's name when it is captured)")
        elif unlogged:
            left_out = "it is UNLOGGED: its changes are not in the log"
        elif key and not _carries(str(identity), own, key):
            left_out = (f"its REPLICA IDENTITY {IDENTITY.get(str(identity), '?')} does not "
                        f"carry its key ({', '.join(key)}, {key_from}): published, its "
                        "UPDATEs and DELETEs would fail or lose the key (set REPLICA IDENTITY "
                        "USING INDEX of the key, or FULL)")
        elif key and int(str(without_pk if key_from == "primary key" else not_full)):
            left_out = ("partitions of it have a REPLICA IDENTITY that does not carry its key "
                        f"({', '.join(key)}, {key_from}): published, their UPDATEs and DELETEs "
                        "would fail or lose the key (named in source.tables, dblog preflight "
                        "lists them)")
        found.append(Candidate(table, key, left_out))
    return found


def _carries(identity: str, indexes: Sequence[UniqueIndex], key: Sequence[str]) -> bool:
    """:attr:`TableInfo.key_in_log` from a candidate's catalog rows."""
    carried = [i.columns for i in indexes
               if (identity == "d" and i.primary) or (identity == "i" and i.identity)]
    return identity == "f" or (bool(carried) and set(carried[0]) == set(key))


def load_types(
    conn: psycopg.Connection[tuple[object, ...]], oids: Iterable[int], known: Mapping[int, PgType]
) -> dict[int, PgType]:
    """``known`` plus the types of ``oids`` and, transitively, their element and base types."""
    return types_of(lambda sql, params: conn.execute(sql, params).fetchall(), oids, known)


TYPES_SQL = (
    "SELECT t.oid::int, t.typname, t.typcategory, t.typelem::int, t.typbasetype::int, "
    "t.typdelim, n.nspname, CASE WHEN t.typtype = 'e' THEN ARRAY(SELECT enumlabel "
    "FROM pg_enum WHERE enumtypid = t.oid ORDER BY enumsortorder) END "
    "FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
    "WHERE t.oid = ANY(%s)"
)


def types_of(query: Callable[[str, Sequence[object]], Sequence[Sequence[object]]],
             oids: Iterable[int], known: Mapping[int, PgType]) -> dict[int, PgType]:
    """:func:`load_types` through any connection's ``query`` (verify's)."""
    types = dict(known)
    tried: set[int] = set()
    wanted = {oid for oid in oids if oid not in types}
    while wanted:
        tried |= wanted
        rows = query(TYPES_SQL, (sorted(wanted),))
        for oid, name, category, elem, base, delim, namespace, labels in rows:
            types[int(str(oid))] = PgType(
                oid=int(str(oid)), name=str(name), category=str(category),
                element_oid=int(str(elem)), base_oid=int(str(base)), delimiter=str(delim),
                namespace=str(namespace), labels=_texts(labels),
            )
        wanted = {
            ref for t in types.values() for ref in (t.element_oid, t.base_oid)
            if ref and ref not in types and ref not in tried
        }
    return types


def _texts(array: object) -> tuple[str, ...]:
    """A text[] the driver loaded (a list; None for NULL) as a tuple of str."""
    return tuple(str(x) for x in array) if isinstance(array, list) else ()


def builtin_types() -> dict[int, PgType]:
    return dict(BUILTIN_TYPES)


def table_problems(info: TableInfo | None, table: str) -> list[Problem]:
    if info is None:
        schema, name = split_table(table)
        read_as = f" (read as table {quote_ident(name)} in schema {quote_ident(schema)}: " \
            "the first dot ends the schema's name)" if "." in name else ""
        return [Problem(f"table {table} does not exist (or is not a table){read_as}",
                        "check source.tables in the configuration")]
    sql = qualified(info.schema, info.name)
    if not info.key_columns:
        return [Problem(
            f"table {table} has no primary key and no unique index on NOT NULL columns: "
            "dumps read in chunks of a key, and the merge keys the target by it",
            f"ALTER TABLE {sql} ADD PRIMARY KEY (<columns>); -- or name its key columns: "
            f'[source] keys = {{ "{table}" = ["<column>", ...] }}',
        )]
    problems = []
    if info.key_from == "source.keys":
        generated = {g[0] for g in info.generated}
        unknown = [c for c in info.key_columns if c not in info.columns or c in generated]
        if unknown:
            return [Problem(
                f"source.keys names column(s) {', '.join(unknown)} of {table}, which it does "
                f"not have (or generates): its columns are {', '.join(info.columns)}",
                f"fix source.keys for {table} in the configuration")]
        nullable = [c for c in info.key_columns if c in info.nullable]
        if nullable:
            problems.append(Problem(
                f"key column(s) {', '.join(nullable)} of {table} (source.keys) may be NULL: "
                "a row with a NULL key would never be dumped",
                " ".join(f"ALTER TABLE {sql} ALTER COLUMN {quote_ident(c)} SET NOT NULL;"
                         for c in nullable)))
    problems += identity_problems(info)
    return problems


IDENTITY = {"d": "DEFAULT", "f": "FULL", "i": "USING INDEX", "n": "NOTHING"}


def identity_problems(info: TableInfo) -> list[Problem]:
    """The log must carry the key's old values (updates that change it, deletes): FULL
    does for any key, DEFAULT for the primary key, USING INDEX for that index's columns."""
    if info.key_in_log:
        return []
    sql = qualified(info.schema, info.name)
    key = ", ".join(info.key_columns)
    if info.key_from.startswith("unique index "):
        index = info.key_from.removeprefix("unique index ")
        fix = (f"ALTER TABLE {sql} REPLICA IDENTITY USING INDEX {quote_ident(index)}; "
               f"-- or REPLICA IDENTITY FULL")
    else:
        fix = f"ALTER TABLE {sql} REPLICA IDENTITY FULL;"
    return [Problem(
        f"table {info.table} has REPLICA IDENTITY {IDENTITY.get(info.replica_identity, '?')}"
        f", so the log would not carry the old values of its key ({key}, {info.key_from}) "
        "in updates and deletes", fix)]


def table_line(info: TableInfo) -> str:
    """What ``dblog preflight`` shows of a captured table: its key and what its identity
    and generated columns mean for capture."""
    identity = IDENTITY.get(info.replica_identity, info.replica_identity)
    line = f"table {info.table}: key ({', '.join(info.key_columns)}) from {info.key_from}; " \
        f"REPLICA IDENTITY {identity}"
    if info.replica_identity == "f":
        line += " (complete old rows in the log)"
    elif info.key_in_log:
        line += (" (old key values in the log; an update that keeps a large TOASTed value "
                 "comes without it, and the worker dumps that row again)")
    if info.generated:
        line += (f"; generated column(s) {', '.join(g[0] for g in info.generated)}: not in "
                 "the log (pgoutput before PostgreSQL 18) nor the landing zone; a PostgreSQL "
                 "target computes them with the same expression")
    return line


def partition_problems(
    conn: psycopg.Connection[tuple[object, ...]], infos: Sequence[TableInfo],
    of: Sequence[TableInfo] | None = None,
) -> list[Problem]:
    """Partitioned tables: the log carries each partition's old rows as the partition's
    REPLICA IDENTITY says (the partitioned table's own is not inherited); and a table
    captured together with one of its partitions would have the partition's changes
    published under the partitioned table's name only. ``infos``: every captured table;
    the problems are those of ``of`` (default: all of them)."""
    problems = []
    captured = {info.oid: info for info in infos}
    for info in infos if of is None else of:
        if info.partitioned:
            leaves = conn.execute(
                "SELECT n.nspname, c.relname FROM pg_partition_tree(%s) AS t "
                "JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE t.isleaf AND c.relreplident <> 'f' AND NOT (c.relreplident = 'd' "
                "AND %s AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid "
                "AND i.indisprimary)) ORDER BY 1, 2",
                (info.oid, info.key_from == "primary key"),
            ).fetchall()
            if leaves:
                names = [qualified(str(a), str(b)) for a, b in leaves]
                problems.append(Problem(
                    f"partitions of {info.table} have a REPLICA IDENTITY that does not carry "
                    "the key (a partitioned table's is not inherited): the log would carry "
                    f"their updated and deleted rows without it: {', '.join(names[:5])}"
                    + (f" and {len(names) - 5} more" if len(names) > 5 else ""),
                    " ".join(f"ALTER TABLE {n} REPLICA IDENTITY FULL;" for n in names),
                ))
        ancestors = conn.execute(
            "SELECT relid::int FROM pg_partition_ancestors(%s) WHERE relid <> %s",
            (info.oid, info.oid),
        ).fetchall()
        for (ancestor,) in ancestors:
            parent = captured.get(int(str(ancestor)))
            if parent is not None:
                problems.append(Problem(
                    f"{info.table} is a partition of {parent.table}, which is captured too: "
                    f"its changes are in the log as changes of {parent.table} only",
                    f"remove {info.table} from source.tables (the dumps and the log of "
                    f"{parent.table} cover its rows)",
                ))
    return problems


_PUBLISH = ("insert", "update", "delete", "truncate")


def publication_setting_problems(
    conn: psycopg.Connection[tuple[object, ...]], publication: str, infos: Sequence[TableInfo],
    watermark_table: bool = True,
) -> list[Problem]:
    """An existing publication must publish every operation, whole rows and columns, and a
    partitioned table's changes under its own name; dblog changes none of these for you."""
    row = conn.execute(
        "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot FROM pg_publication "
        "WHERE pubname = %s", (publication,),
    ).fetchone()
    if row is None:
        return []  # the worker creates it, with these settings
    name = quote_ident(publication)
    problems = []
    missing = [op for op, on in zip(_PUBLISH, row[:4], strict=True) if not on]
    if missing:
        problems.append(Problem(
            f"publication {publication} does not publish {', '.join(missing)}: those changes "
            "would never reach the output",
            f"ALTER PUBLICATION {name} SET (publish = '{', '.join(_PUBLISH)}');",
        ))
    partitioned = [info.table for info in infos if info.partitioned]
    if partitioned and not row[4]:
        problems.append(Problem(
            f"publication {publication} publishes the changes of partitioned table(s) "
            f"{', '.join(partitioned)} under their partitions' names, which dblog does not "
            "capture: every change would be lost",
            f"ALTER PUBLICATION {name} SET (publish_via_partition_root = true);",
        ))
    wanted = {(info.schema, info.name) for info in infos}
    if watermark_table:
        wanted.add((SCHEMA, WATERMARK_TABLE))
    filtered = conn.execute(
        "SELECT n.nspname, c.relname, r.prqual IS NOT NULL, r.prattrs IS NOT NULL "
        "FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid "
        "JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE p.pubname = %s AND (r.prqual IS NOT NULL OR r.prattrs IS NOT NULL) ORDER BY 1, 2",
        (publication,),
    ).fetchall()
    for schema, table, rows, columns in filtered:
        if (str(schema), str(table)) not in wanted:
            continue
        what = " and ".join(w for w, on in (("rows (WHERE)", rows), ("columns", columns)) if on)
        problems.append(Problem(
            f"publication {publication} filters the {what} of {schema}.{table}: the changes "
            "it leaves out would never reach the output",
            f"ALTER PUBLICATION {name} SET TABLE "
            + ", ".join(qualified(s, t) for s, t in sorted(wanted)) + ";",
        ))
    return problems


def publication_is_fixed(conn: psycopg.Connection[tuple[object, ...]], publication: str) -> bool:
    """A publication FOR ALL TABLES or FOR TABLES IN SCHEMA: its tables are not set one by
    one (the worker leaves it as it is; preflight checks it holds the captured tables)."""
    row = conn.execute(
        "SELECT p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_namespace s "
        "WHERE s.pnpubid = p.oid) FROM pg_publication p WHERE p.pubname = %s", (publication,),
    ).fetchone()
    return row is not None and bool(row[0])


def server_problems(conn: psycopg.Connection[tuple[object, ...]]) -> list[Problem]:
    problems = []
    settings = {str(name): str(value) for name, value in conn.execute(
        "SELECT name, setting FROM pg_settings WHERE name IN "
        "('wal_level', 'max_replication_slots', 'max_wal_senders', 'server_encoding')"
    ).fetchall()}
    if settings.get("wal_level") != "logical":
        problems.append(Problem(
            f"wal_level is {settings.get('wal_level')}; logical decoding needs logical",
            "ALTER SYSTEM SET wal_level = logical; -- then restart PostgreSQL",
        ))
    for name in ("max_replication_slots", "max_wal_senders"):
        if int(str(settings.get(name, "0"))) < 1:
            problems.append(Problem(f"{name} is 0", f"ALTER SYSTEM SET {name} = 10; -- restart"))
    if settings.get("server_encoding") != "UTF8":
        problems.append(Problem(
            f"the server encoding is {settings.get('server_encoding')}; dblog reads UTF8 only",
            "create the database with ENCODING 'UTF8'",
        ))
    role = conn.execute(
        "SELECT current_user, rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if role is not None and not (role[1] or role[2]):
        problems.append(Problem(
            f"role {quote_ident(str(role[0]))} may not stream the log (it lacks REPLICATION)",
            f"ALTER ROLE {quote_ident(str(role[0]))} WITH REPLICATION;",
        ))
    return problems


def _database(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    row = conn.execute("SELECT current_database()").fetchone()
    return str(row[0]) if row else "<database>"


def _role(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    row = conn.execute("SELECT current_user").fetchone()
    return quote_ident(str(row[0])) if row else "<worker role>"


EMIT_MESSAGE = "pg_logical_emit_message(boolean, text, text)"


def select_problems(conn: psycopg.Connection[tuple[object, ...]],
                    tables: Sequence[TableInfo]) -> list[Problem]:
    """The tables the worker's role may not SELECT from (the dumps read them)."""
    problems = []
    role = _role(conn)
    for info in tables:
        allowed = conn.execute("SELECT has_table_privilege(%s, 'SELECT')", (info.oid,)).fetchone()
        if allowed is None or not allowed[0]:
            problems.append(Problem(
                f"role {role} may not SELECT from {info.table}",
                f"GRANT SELECT ON {qualified(info.schema, info.name)} TO {role};",
            ))
    return problems


def privilege_problems(
    conn: psycopg.Connection[tuple[object, ...]], tables: Sequence[TableInfo],
    watermark_table: bool = True,
) -> list[Problem]:
    problems = select_problems(conn, tables)
    role = _role(conn)
    if not watermark_table:
        return problems + message_problems(conn)
    has_schema = conn.execute("SELECT to_regnamespace(%s)", (SCHEMA,)).fetchone()
    if has_schema is None or has_schema[0] is None:
        can = conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')").fetchone()
        if can is None or not can[0]:
            problems.append(Problem(
                f"schema {SCHEMA} does not exist and role {role} may not create it",
                f"CREATE SCHEMA {SCHEMA} AUTHORIZATION {role};",
            ))
        return problems
    watermark = f"{SCHEMA}.{WATERMARK_TABLE}"
    if conn.execute("SELECT to_regclass(%s)", (watermark,)).fetchone() == (None,):
        can = conn.execute("SELECT has_schema_privilege(%s, 'CREATE')", (SCHEMA,)).fetchone()
        if can is None or not can[0]:
            problems.append(Problem(
                f"table {watermark} does not exist and role {role} may not create it",
                f"GRANT CREATE ON SCHEMA {SCHEMA} TO {role};",
            ))
        return problems
    can = conn.execute(
        "SELECT has_table_privilege(%s, 'SELECT, INSERT, UPDATE')", (watermark,)
    ).fetchone()
    if can is None or not can[0]:
        problems.append(Problem(
            f"role {role} may not write the watermark table {watermark}",
            f"GRANT SELECT, INSERT, UPDATE ON {watermark} TO {role};",
        ))
    return problems


def message_problems(conn: psycopg.Connection[tuple[object, ...]]) -> list[Problem]:
    """Watermarks as logical decoding messages: PostgreSQL 14+ (pgoutput's ``messages``),
    and the role may run pg_logical_emit_message."""
    row = conn.execute("SELECT current_setting('server_version_num')::int, "
                       "has_function_privilege(%s, 'EXECUTE')", (EMIT_MESSAGE,)).fetchone()
    assert row is not None
    problems = []
    if int(str(row[0])) < 140000:
        problems.append(Problem(
            "watermarks = \"message\" needs PostgreSQL 14 or later (pgoutput's messages "
            "option); this server is older",
            "set source.watermarks = \"table\" (the default), or upgrade the server"))
    if not row[1]:
        role = _role(conn)
        problems.append(Problem(
            f"role {role} may not run {EMIT_MESSAGE}, which writes the watermarks",
            f"GRANT EXECUTE ON FUNCTION {EMIT_MESSAGE} TO {role};"))
    return problems


def published_tables(tables: Sequence[str], watermark_table: bool = True
                     ) -> set[tuple[str, str]]:
    """What the publication holds: the captured tables, and the watermark table unless the
    watermarks are logical decoding messages."""
    captured = {split_table(t) for t in tables}
    return captured | {(SCHEMA, WATERMARK_TABLE)} if watermark_table else captured


def publication_problems(
    conn: psycopg.Connection[tuple[object, ...]], publication: str, tables: Sequence[str],
    watermark_table: bool = True,
) -> list[Problem]:
    """The worker creates or alters the publication: it must own the tables, or find it done."""
    wanted = published_tables(tables, watermark_table)
    rows = conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
        (publication,),
    ).fetchall()
    exists = conn.execute(
        "SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)
    ).fetchone() is not None
    published = {(str(a), str(b)) for a, b in rows}
    if exists and publication_is_fixed(conn, publication):
        return _fixed_publication_problems(conn, publication, wanted - published)
    if exists and published == wanted:
        return []
    superuser = conn.execute(
        "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if superuser is not None and superuser[0]:
        return []
    problems = []
    if not exists:
        can = conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')"
                           ).fetchone()
        if can is None or not can[0]:
            problems.append(Problem(
                f"publication {publication} does not exist and role {_role(conn)} may not "
                "create publications in this database (CREATE on the database)",
                f"GRANT CREATE ON DATABASE {quote_ident(_database(conn))} TO {_role(conn)};",
            ))
    not_owned = []
    for schema, name in sorted(wanted):
        owned = conn.execute(
            "SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relname = %s", (schema, name),
        ).fetchone()
        if owned is not None and not owned[0]:
            not_owned.append(f"{schema}.{name}")
    if not not_owned:
        return problems
    names = ", ".join(qualified(s, n) for s, n in sorted(wanted))
    verb = f"ALTER PUBLICATION {quote_ident(publication)} SET TABLE" if exists else (
        f"CREATE PUBLICATION {quote_ident(publication)} FOR TABLE")
    role = _role(conn)
    first = ""
    watermark = f"{SCHEMA}.{WATERMARK_TABLE}"
    if watermark_table and conn.execute("SELECT to_regclass(%s)", (watermark,)
                                        ).fetchone() == (None,):
        # the publication names the watermark table, which the worker creates only once
        # preflight passes: the fix creates it, owned by the worker's role
        first = (f"CREATE SCHEMA IF NOT EXISTS {SCHEMA} AUTHORIZATION {role}; "
                 f"{WATERMARK_DDL}; ALTER TABLE {watermark} OWNER TO {role}; ")
    state = "does not hold exactly the captured tables" if exists else "does not exist"
    return [Problem(
        f"publication {publication} {state} and role {role} does not own "
        f"{', '.join(not_owned)}, so it cannot {'alter' if exists else 'create'} it",
        f"{first}{verb} {names}; -- as the tables' owner or a superuser",
    )]


def _fixed_publication_problems(
    conn: psycopg.Connection[tuple[object, ...]], publication: str,
    left_out: set[tuple[str, str]],
) -> list[Problem]:
    """A publication FOR ALL TABLES or TABLES IN SCHEMA must hold the captured tables, and
    the watermark table once the worker creates it."""
    watermark = f"{SCHEMA}.{WATERMARK_TABLE}"
    first = ""
    if (SCHEMA, WATERMARK_TABLE) in left_out and conn.execute(
            "SELECT to_regclass(%s)", (watermark,)).fetchone() == (None,):
        row = conn.execute(
            "SELECT p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_namespace s "
            "JOIN pg_namespace n ON n.oid = s.pnnspid WHERE s.pnpubid = p.oid "
            "AND n.nspname = %s) FROM pg_publication p WHERE p.pubname = %s",
            (SCHEMA, publication),
        ).fetchone()
        if row is not None and row[0]:
            left_out = left_out - {(SCHEMA, WATERMARK_TABLE)}  # published once created
        else:
            first = f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}; {WATERMARK_DDL}; "
    if not left_out:
        return []
    return [Problem(
        f"publication {publication} (FOR ALL TABLES or TABLES IN SCHEMA; dblog does not "
        f"change it) does not publish {', '.join(f'{s}.{n}' for s, n in sorted(left_out))}",
        f"{first}ALTER PUBLICATION {quote_ident(publication)} ADD TABLE "
        + ", ".join(qualified(s, n) for s, n in sorted(left_out)) + ";",
    )]


def slot_problems(
    conn: psycopg.Connection[tuple[object, ...]], slot: str
) -> list[Problem]:
    row = conn.execute(
        "SELECT plugin, database = current_database(), slot_type FROM pg_replication_slots "
        "WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return []
    if row[2] != "logical" or row[0] != "pgoutput" or not row[1]:
        return [Problem(
            f"replication slot {slot} exists but is not a pgoutput slot of this database",
            f"SELECT pg_drop_replication_slot('{slot}'); -- or set source.slot to another name",
        )]
    return []
