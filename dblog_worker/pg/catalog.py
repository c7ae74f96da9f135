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
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    replica_identity: str
    # what ``SELECT *`` reads: every column, generated ones too, in order
    star: tuple[str, ...] = ()
    star_oids: tuple[int, ...] = ()
    star_types: tuple[str, ...] = ()  # format_type(atttypid, NULL) of each
    partitioned: bool = False

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


def load_table(conn: psycopg.Connection[tuple[object, ...]], table: str) -> TableInfo | None:
    """The table's columns and primary key, or None if there is no such table."""
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
        "SELECT attname, atttypid::int, attgenerated <> '', format_type(atttypid, NULL) "
        "FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid,),
    ).fetchall()
    columns = [c for c in every if not c[2]]  # the log does not carry generated columns
    key = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_index i "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.ord",
        (oid,),
    ).fetchall()
    return TableInfo(
        schema=schema,
        name=name,
        oid=oid,
        columns=tuple(str(c[0]) for c in columns),
        type_oids=tuple(int(str(c[1])) for c in columns),
        key_columns=tuple(str(k[0]) for k in key),
        key_types=tuple(str(k[1]) for k in key),
        replica_identity=str(row[2]),
        star=tuple(str(c[0]) for c in every),
        star_oids=tuple(int(str(c[1])) for c in every),
        star_types=tuple(str(c[3]) for c in every),
        partitioned=str(row[1]) == "p",
    )


_CANDIDATES_SQL = (
    "SELECT n.nspname, c.relname, c.relpersistence = 'u', "
    "ARRAY(SELECT a.attname::text FROM pg_index i "
    "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
    "WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.ord), "
    "CASE WHEN c.relispartition THEN (SELECT rn.nspname || '.' || r.relname FROM pg_class r "
    "JOIN pg_namespace rn ON rn.oid = r.relnamespace WHERE r.oid = pg_partition_root(c.oid)) "
    "END "
    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind IN ('r', 'p') "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)' "
    "AND (%s::text[] IS NULL OR n.nspname = ANY(%s::text[]))"
)


def candidates(conn: psycopg.Connection[tuple[object, ...]],
               schemas: Iterable[str] | None) -> list[Candidate]:
    """The tables patterns may match (those of ``schemas``, if given): ordinary and
    partitioned tables out of the system schemas, each with its key; a partition or an
    unlogged table says why a pattern leaves it out."""
    names = None if schemas is None else sorted(schemas)
    found = []
    for schema, name, unlogged, key, root in conn.execute(_CANDIDATES_SQL, (names, names)):
        left_out = None
        if root is not None:
            left_out = (f"it is a partition of {root} (its rows are captured under that "
                        "table's name when it is captured)")
        elif unlogged:
            left_out = "it is UNLOGGED: its changes are not in the log"
        keys = key if isinstance(key, list) else []
        found.append(Candidate(f"{schema}.{name}", tuple(str(k) for k in keys), left_out))
    return found


def load_types(
    conn: psycopg.Connection[tuple[object, ...]], oids: Iterable[int], known: Mapping[int, PgType]
) -> dict[int, PgType]:
    """``known`` plus the types of ``oids`` and, transitively, their element and base types."""
    return types_of(lambda sql, params: conn.execute(sql, params).fetchall(), oids, known)


TYPES_SQL = ("SELECT oid::int, typname, typcategory, typelem::int, typbasetype::int, typdelim "
             "FROM pg_type WHERE oid = ANY(%s)")


def types_of(query: Callable[[str, Sequence[object]], Sequence[Sequence[object]]],
             oids: Iterable[int], known: Mapping[int, PgType]) -> dict[int, PgType]:
    """:func:`load_types` through any connection's ``query`` (verify's)."""
    types = dict(known)
    tried: set[int] = set()
    wanted = {oid for oid in oids if oid not in types}
    while wanted:
        tried |= wanted
        rows = query(TYPES_SQL, (sorted(wanted),))
        for oid, name, category, elem, base, delim in rows:
            types[int(str(oid))] = PgType(
                oid=int(str(oid)), name=str(name), category=str(category),
                element_oid=int(str(elem)), base_oid=int(str(base)), delimiter=str(delim),
            )
        wanted = {
            ref for t in types.values() for ref in (t.element_oid, t.base_oid)
            if ref and ref not in types and ref not in tried
        }
    return types


def builtin_types() -> dict[int, PgType]:
    return dict(BUILTIN_TYPES)


def table_problems(info: TableInfo | None, table: str) -> list[Problem]:
    if info is None:
        schema, name = split_table(table)
        read_as = f" (read as table {quote_ident(name)} in schema {quote_ident(schema)}: " \
            "the first dot ends the schema's name)" if "." in name else ""
        return [Problem(f"table {table} does not exist (or is not a table){read_as}",
                        "check source.tables in the configuration")]
    problems = []
    if not info.key_columns:
        problems.append(Problem(
            f"table {table} has no primary key: dumps need one to read in chunks",
            f"ALTER TABLE {qualified(info.schema, info.name)} ADD PRIMARY KEY (<columns>);",
        ))
    if info.replica_identity != "f":
        problems.append(Problem(
            f"table {table} does not have REPLICA IDENTITY FULL: the log would not carry "
            "complete row images (unchanged large values, old rows of deletes)",
            f"ALTER TABLE {qualified(info.schema, info.name)} REPLICA IDENTITY FULL;",
        ))
    return problems


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
                "WHERE t.isleaf AND c.relreplident <> 'f' ORDER BY 1, 2",
                (info.oid,),
            ).fetchall()
            if leaves:
                names = [qualified(str(a), str(b)) for a, b in leaves]
                problems.append(Problem(
                    f"partitions of {info.table} do not have REPLICA IDENTITY FULL (a "
                    "partitioned table's is not inherited): the log would carry their updated "
                    f"and deleted rows incomplete: {', '.join(names[:5])}"
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
