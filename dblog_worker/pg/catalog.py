"""What the PostgreSQL source reads from the catalog, and the checks of ``dblog preflight``.

Every problem found is a :class:`Problem` that says what is wrong and the SQL (or
setting) that fixes it; the worker refuses to start while any remains.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psycopg

from dblog_worker.pg.queries import TableShape, qualified, quote_ident
from dblog_worker.source import Problem
from dblog_worker.values import BUILTIN_TYPES, PgType

SCHEMA = "dblog"
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
    columns: tuple[str, ...]
    type_oids: tuple[int, ...]
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    replica_identity: str

    @property
    def table(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def shape(self) -> TableShape:
        return TableShape(self.schema, self.name, self.columns, self.key_columns, self.key_types)


def split_table(table: str) -> tuple[str, str]:
    schema, _, name = table.partition(".")
    return schema, name


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
    columns = conn.execute(
        "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
        "AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
        (oid,),
    ).fetchall()
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
    )


def load_types(
    conn: psycopg.Connection[tuple[object, ...]], oids: Iterable[int], known: Mapping[int, PgType]
) -> dict[int, PgType]:
    """``known`` plus the types of ``oids`` and, transitively, their element and base types."""
    types = dict(known)
    tried: set[int] = set()
    wanted = {oid for oid in oids if oid not in types}
    while wanted:
        tried |= wanted
        rows = conn.execute(
            "SELECT oid::int, typname, typcategory, typelem::int, typbasetype::int, typdelim "
            "FROM pg_type WHERE oid = ANY(%s)",
            (sorted(wanted),),
        ).fetchall()
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
        return [Problem(f"table {table} does not exist (or is not a table)",
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


def privilege_problems(
    conn: psycopg.Connection[tuple[object, ...]], tables: Sequence[TableInfo]
) -> list[Problem]:
    problems = []
    role = _role(conn)
    for info in tables:
        allowed = conn.execute("SELECT has_table_privilege(%s, 'SELECT')", (info.oid,)).fetchone()
        if allowed is None or not allowed[0]:
            problems.append(Problem(
                f"role {role} may not SELECT from {info.table}",
                f"GRANT SELECT ON {qualified(info.schema, info.name)} TO {role};",
            ))
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


def published_tables(tables: Sequence[str]) -> set[tuple[str, str]]:
    """What the publication holds: the watermark table and the captured tables."""
    return {(SCHEMA, WATERMARK_TABLE)} | {split_table(t) for t in tables}


def publication_problems(
    conn: psycopg.Connection[tuple[object, ...]], publication: str, tables: Sequence[str]
) -> list[Problem]:
    """The worker creates or alters the publication: it must own the tables, or find it done."""
    wanted = published_tables(tables)
    rows = conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
        (publication,),
    ).fetchall()
    exists = conn.execute(
        "SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)
    ).fetchone() is not None
    if exists and {(str(a), str(b)) for a, b in rows} == wanted:
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
    if conn.execute("SELECT to_regclass(%s)", (watermark,)).fetchone() == (None,):
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
