"""The DAG files (dags/): they import without errors and without touching a database, the
network, a connection or a variable; their forms accept what is valid and refuse the rest
with a message that names the field; the pure parts (the dump form's check, the backfill's
pace, the settings from the environment, the SQL that removes extra rows) on exact output.

The runs themselves, against a worker, Redis, PostgreSQL and Spark: test_dags_e2e.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from airflow.sdk import DAG, Context
from airflow.sdk.definitions.param import ParamsDict
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    ParamValidationError,
    TaskDeferred,
)
from dblog_airflow.operators.dump import DblogDumpOperator
from dblog_airflow.triggers.dump import DblogDumpTrigger

from dblog_worker.dump_spec import DumpSpec
from dblog_worker.requests import DumpKind, DumpRequest, Priority, RequestState
from dblog_worker.state import StateStore
from tests.airflow.conftest import DblogConnection
from tests.airflow.dag_files import DAGS, dag_bag, load_dags

from dblog_dags import settings  # isort: skip  (dags/ is on sys.path from here)
from dblog_worker.mysql import target as my_target
from dblog_worker.pg import target as pg_target

from dblog_dags.pace import DumpPaceSensor, Pace, parse_busy_hours  # isort: skip
from dblog_dags.params import check_dump, render_templates  # isort: skip

DAG_IDS = {"dblog_dump", "dblog_repair", "dblog_backfill", "dblog_merge", "dblog_landing"}


@pytest.fixture(scope="module")
def dags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DAG]:
    config = tmp_path_factory.mktemp("config") / "shop.toml"
    config.write_text('[source]\nname = "shop"\ntables = ["public.customers", "public.orders"]\n')
    return load_dags({"DBLOG_CONFIG": str(config)})


# -- parsing ------------------------------------------------------------------------------

# Run in a fresh interpreter whose metadata database cannot exist, with every way out
# (sockets, the ORM's engine, connection and variable lookups) replaced by a recorder.
PARSE_SCRIPT = r"""
import json, socket, sys
from pathlib import Path
touched = []

def refuse(what):
    def call(*args, **kwargs):
        touched.append(what)
        raise RuntimeError(f"{what} while parsing DAG files")
    return call

socket.socket.connect = refuse("socket connect")
socket.create_connection = refuse("socket create_connection")
import sqlalchemy.engine
sqlalchemy.engine.Engine.connect = refuse("metadata database")
sqlalchemy.engine.Engine.raw_connection = refuse("metadata database")
from airflow.sdk import BaseHook, Connection, Variable
BaseHook.get_connection = classmethod(refuse("connection lookup"))
Connection.get = classmethod(refuse("connection lookup"))
Variable.get = staticmethod(refuse("variable lookup"))
import warnings
warnings.filterwarnings("ignore", "GitWildMatchPattern", DeprecationWarning)
from airflow.dag_processing.dagbag import BundleDagBag
dags = Path(sys.argv[1])
bag = BundleDagBag(dag_folder=dags, bundle_path=dags, bundle_name="dags-folder")
print(json.dumps({"dags": {d.dag_id: sorted(d.task_ids) for d in bag.dags.values()},
                  "errors": bag.import_errors, "touched": touched}))
"""


def test_dag_files_import_without_database_network_or_connections(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    environ |= {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/no/such/dir/airflow.db",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "DBLOG_CONFIG": str(tmp_path / "missing.toml"),  # unreadable: no pick list, no error
    }
    result = subprocess.run([sys.executable, "-c", PARSE_SCRIPT, str(DAGS)], env=environ,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["errors"] == {}
    assert parsed["touched"] == []
    assert parsed["dags"] == {
        "dblog_backfill": ["check", "merge", "pace", "submit", "verify", "wait"],
        "dblog_dump": ["check", "merge", "should_merge", "submit", "verify", "wait"],
        "dblog_landing": ["maintain"],
        "dblog_merge": ["merge", "sources"],
        "dblog_repair": ["compare", "merge", "remove_extra", "submit", "verify", "wait"],
    }


def test_task_order(dags: dict[str, DAG]) -> None:
    def downstream(dag: DAG) -> dict[str, list[str]]:
        return {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}

    assert set(dags) == DAG_IDS
    assert downstream(dags["dblog_dump"]) == {
        "check": ["submit"], "submit": ["wait"], "wait": ["should_merge"],
        "should_merge": ["merge"], "merge": ["verify"], "verify": []}
    assert downstream(dags["dblog_repair"]) == {
        "compare": ["submit"], "submit": ["wait"], "wait": ["merge"], "merge": ["remove_extra"],
        "remove_extra": ["verify"], "verify": []}
    assert downstream(dags["dblog_backfill"]) == {
        "check": ["submit"], "submit": ["pace", "wait"], "wait": ["merge"], "pace": [],
        "merge": ["verify"], "verify": []}
    assert getattr(dags["dblog_dump"].task_dict["wait"], "deferrable", False) is True


def test_schedules_and_defaults_come_from_the_environment(dags: dict[str, DAG]) -> None:
    assert dags["dblog_dump"].schedule is None and dags["dblog_repair"].schedule is None
    assert dags["dblog_merge"].schedule == "*/15 * * * *"
    assert dags["dblog_merge"].max_active_runs == 1 and not dags["dblog_merge"].catchup
    assert dags["dblog_backfill"].schedule == "@weekly" and not dags["dblog_backfill"].catchup
    assert dags["dblog_backfill"].params["scope"] == "all"
    configured = load_dags({
        "DBLOG_MERGE_SCHEDULE": "@hourly", "DBLOG_MERGE_CONNECTIONS": "shop, billing,shop",
        "DBLOG_BACKFILL_SCHEDULE": "0 2 * * 6", "DBLOG_BACKFILL_TABLES": "public.orders",
        "DBLOG_BACKFILL_CHUNK_SIZE": "2000", "DBLOG_BACKFILL_BUSY_HOURS": "08-18",
        "DBLOG_BACKFILL_BUSY_DELAY_MS": "250", "DBLOG_BACKFILL_TIMEZONE": "Europe/Paris",
        "DBLOG_CONN_ID": "shop",
    })
    merge = configured["dblog_merge"]
    assert merge.schedule == "@hourly"
    # one task mapped over the connections the run reads from the setting, not one per name
    assert sorted(merge.task_ids) == ["merge", "sources"]
    assert merge.task_dict["sources"].downstream_task_ids == {"merge"}
    assert type(merge.task_dict["merge"]).__name__ == "MappedOperator"
    assert settings.merge_connections({"DBLOG_MERGE_CONNECTIONS": "shop, billing,shop"}) == [
        "shop", "billing"]
    assert settings.merge_connections({"AIRFLOW__DBLOG__CONN_ID": "shop"}) == ["shop"]
    backfill = configured["dblog_backfill"]
    assert backfill.schedule == "0 2 * * 6"
    assert {k: backfill.params[k] for k in ("conn_id", "scope", "tables", "chunk_size",
                                            "delay_ms", "busy_delay_ms", "busy_hours")} == {
        "conn_id": "shop", "scope": "tables", "tables": ["public.orders"], "chunk_size": 2000,
        "delay_ms": 0, "busy_delay_ms": 250, "busy_hours": "08-18"}
    assert configured["dblog_dump"].params["conn_id"] == "shop"
    filtered = load_dags({
        "DBLOG_BACKFILL_TABLES": "public.orders", "DBLOG_BACKFILL_FROM_KEY": "[7, \"EU\"]",
        "DBLOG_BACKFILL_WHERE": '[{"column": "updated_at", "op": ">=", '
                                '"value": "{{ data_interval_start }}"}]'})["dblog_backfill"]
    assert {k: filtered.params[k] for k in ("where", "from_key", "to_key")} == {
        "where": [{"column": "updated_at", "op": ">=", "value": "{{ data_interval_start }}"}],
        "from_key": '[7, "EU"]', "to_key": None}


def test_tasks_retry_a_passing_failure(dags: dict[str, DAG]) -> None:
    for dag_id in ("dblog_dump", "dblog_repair", "dblog_backfill"):
        submit, wait = (dags[dag_id].task_dict[t] for t in ("submit", "wait"))
        assert (submit.retries, wait.retries) == (2, 2), dag_id
        assert submit.retry_delay == timedelta(seconds=30), dag_id
    # The merge keeps its own (a merge that meets another one waits a minute).
    assert dags["dblog_dump"].task_dict["merge"].retry_delay == timedelta(minutes=1)
    configured = load_dags({"DBLOG_TASK_RETRIES": "0", "DBLOG_TASK_RETRY_DELAY_S": "5"})
    assert configured["dblog_repair"].task_dict["submit"].retries == 0
    assert configured["dblog_dump"].task_dict["wait"].retry_delay == timedelta(seconds=5)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("DBLOG_BACKFILL_CHUNK_SIZE", "0", "DBLOG_BACKFILL_CHUNK_SIZE=0 is out of range"),
    ("DBLOG_BACKFILL_DELAY_MS", "soon", "DBLOG_BACKFILL_DELAY_MS='soon' is not a whole number"),
    ("DBLOG_BACKFILL_BUSY_HOURS", "8am-6pm",
     "DBLOG_BACKFILL_BUSY_HOURS: busy hours '8am-6pm' are not HH-HH"),
    ("DBLOG_BACKFILL_TABLES", "orders", "'orders' is not a table as schema.table"),
    ("DBLOG_BACKFILL_TIMEZONE", "Mars/Olympus",
     "DBLOG_BACKFILL_TIMEZONE='Mars/Olympus' is not a time zone name"),
    ("DBLOG_MERGE_CONNECTIONS", "shop db", "'shop db' is not a connection id"),
    ("DBLOG_TASK_RETRIES", "-1", "DBLOG_TASK_RETRIES=-1 is out of range: from 0 to 20"),
    ("DBLOG_BACKFILL_WHERE", "region = EU", "DBLOG_BACKFILL_WHERE is not JSON"),
    ("DBLOG_BACKFILL_WHERE", '[["region", "=", "EU"]]',
     "DBLOG_BACKFILL_WHERE must be a JSON array of conditions (objects)"),
    ("DBLOG_BACKFILL_WHERE", '[{"column": "a", "op": "like", "value": 1}]',
     "DBLOG_BACKFILL_WHERE: op must be one of"),
    ("DBLOG_BACKFILL_TO_KEY", "100",
     "DBLOG_BACKFILL_TABLES, _WHERE, _FROM_KEY and _TO_KEY: The dump form is refused: a key "
     "range (from_key, to_key) is of one table's key"),
])
def test_a_bad_setting_is_an_import_error_that_names_it(name: str, value: str,
                                                        message: str) -> None:
    bag = dag_bag({name: value})
    errors = list(bag.import_errors.values())
    assert errors and all(message in error for error in errors), errors
    # A setting of one DAG stops that DAG only; the task retries are every DAG's but the merge's.
    assert len(errors) == (3 if name.startswith("DBLOG_TASK_") else 1)


def test_the_table_pick_list_comes_from_dblog_config(dags: dict[str, DAG]) -> None:
    tables = dags["dblog_dump"].params.get_param("tables").schema
    assert tables["examples"] == ["public.customers", "public.orders"]
    assert dags["dblog_repair"].params.get_param("table").schema["examples"] == [
        "public.customers", "public.orders"]
    bare = load_dags({"DBLOG_CONFIG": ""})
    assert "examples" not in bare["dblog_dump"].params.get_param("tables").schema


# -- the forms ------------------------------------------------------------------------------


def resolve(dag: DAG, conf: Mapping[str, Any]) -> dict[str, Any]:
    """The run's params for a trigger with ``conf``, as Airflow validates them."""
    params: ParamsDict = copy.deepcopy(dag.params)
    params.update(conf)
    params.validate()
    return {k: params[k] for k in params}


VALID: list[tuple[str, dict[str, Any]]] = [
    ("dblog_dump", {"scope": "all"}),
    ("dblog_dump", {"scope": "tables", "tables": ["public.orders", "public.customers"],
                    "chunk_size": 100_000, "delay_ms": 3_600_000}),
    ("dblog_dump", {"scope": "keys", "tables": ["public.orders"], "keys": "[1, 2, 3]",
                    "chunk_size": 1, "delay_ms": 0, "merge": False, "verify": False}),
    ("dblog_dump", {"scope": "keys", "tables": ["shop.orders"],
                    "keys": '\n[[7, "EU"],\n [8, "US"]]\n', "conn_id": "shop.prod-2"}),
    ("dblog_dump", {"scope": "tables", "tables": ["public.not_in_the_list"], "keys": None}),
    ("dblog_repair", {"table": "public.orders"}),
    # any name: split at the first dot, the table's name may hold dots, spaces, anything
    ("dblog_dump", {"scope": "tables", "tables": [
        "public.a%sb", "public.dot.ted", 'sch "x".with space', "d.naïve ☃ `b`",
        "public. lead and trail ", "public.line\nbreak"]}),
    ("dblog_repair", {"table": 'public.x"y %s'}),
    ("dblog_repair", {"table": "public.orders", "chunk_size": 500, "delay_ms": 200}),
    ("dblog_backfill", {}),
    ("dblog_backfill", {"scope": "tables", "tables": ["public.orders"], "busy_hours": "22-06",
                        "busy_delay_ms": 1000}),
    ("dblog_backfill", {"busy_hours": ""}),
    # filtered dumps: the Rows section
    ("dblog_dump", {"scope": "tables", "tables": ["public.orders"], "where": [
        {"column": "region", "op": "in", "values": ["EU", "US"]},
        {"column": "qty", "op": ">", "value": 3}, {"column": "deleted_at", "op": "is null"}],
        "from_key": "10", "to_key": '[20, "x"]'}),
    ("dblog_dump", {"scope": "all", "where": [], "from_key": None}),
    ("dblog_repair", {"table": "public.orders", "where": [
        {"column": "id", "op": "<=", "value": 100}], "to_key": "abc"}),
    ("dblog_backfill", {"where": [
        {"column": "updated_at", "op": ">=", "value": "{{ data_interval_start }}"}]}),
    ("dblog_dump", {"scope": "all", "throttle_max_chunk_ms": 100,
                    "throttle_max_active_sessions": 20, "throttle_max_replica_lag_ms": 5000,
                    "throttle_max_log_lag_mb": 64}),
    ("dblog_repair", {"table": "public.orders", "throttle_max_active_sessions": 8}),
    ("dblog_backfill", {"throttle_max_chunk_ms": 250}),
]


@pytest.mark.parametrize(("dag_id", "conf"), VALID)
def test_the_forms_accept(dags: dict[str, DAG], dag_id: str, conf: dict[str, Any]) -> None:
    params = resolve(dags[dag_id], conf)
    assert {k: params[k] for k in conf} == conf


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("dblog_dump", {"scope": "everything"}, "'everything' is not one of ['all', 'tables'"),
    ("dblog_dump", {"tables": "public.orders"}, "'public.orders' is not of type 'array'"),
    ("dblog_dump", {"tables": ["orders"]}, "'orders' does not match"),
    ("dblog_dump", {"tables": [".orders"]}, "does not match"),
    ("dblog_dump", {"tables": ["public."]}, "does not match"),
    ("dblog_dump", {"tables": ["public.orders", "public.orders"]}, "non-unique elements"),
    ("dblog_dump", {"keys": "1, 2"}, "'1, 2' does not match"),
    ("dblog_dump", {"keys": [1, 2]}, "is not of type 'string', 'null'"),
    ("dblog_dump", {"chunk_size": 0}, "0 is less than the minimum of 1"),
    ("dblog_dump", {"chunk_size": 100_001}, "100001 is greater than the maximum of 100000"),
    ("dblog_dump", {"chunk_size": "500"}, "'500' is not of type 'integer'"),
    ("dblog_dump", {"chunk_size": 2.5}, "2.5 is not of type 'integer'"),
    ("dblog_dump", {"delay_ms": -1}, "-1 is less than the minimum of 0"),
    ("dblog_dump", {"delay_ms": 3_600_001}, "is greater than the maximum of 3600000"),
    ("dblog_dump", {"conn_id": "my conn"}, "'my conn' does not match"),
    ("dblog_dump", {"conn_id": ""}, "should be non-empty"),
    ("dblog_dump", {"merge": "yes"}, "'yes' is not of type 'boolean'"),
    ("dblog_repair", {}, "No value passed and Param has no default value"),
    ("dblog_repair", {"table": "orders"}, "'orders' does not match"),
    ("dblog_repair", {"table": "public.orders", "chunk_size": 0}, "less than the minimum"),
    ("dblog_backfill", {"scope": "keys"}, "'keys' is not one of ['all', 'tables']"),
    ("dblog_backfill", {"busy_hours": "8-18"}, "'8-18' does not match"),
    ("dblog_backfill", {"busy_hours": "08-25"}, "'08-25' does not match"),
    ("dblog_backfill", {"busy_delay_ms": -5}, "less than the minimum"),
    ("dblog_dump", {"throttle_max_chunk_ms": -1}, "-1 is less than the minimum of 0"),
    ("dblog_repair", {"table": "public.orders", "throttle_max_active_sessions": "20"},
     "'20' is not of type 'integer'"),
    ("dblog_backfill", {"throttle_max_log_lag_mb": 1_048_577}, "greater than the maximum"),
]


FILTER_INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("dblog_dump", {"where": "region = EU"}, "'region = EU' is not of type 'array'"),
    ("dblog_dump", {"where": [{"column": "a", "op": "like", "value": "x"}]},
     "'like' is not one of ['=', '!=', '<', '<=', '>', '>=', 'in', 'not in', 'is null', "
     "'is not null']"),
    ("dblog_dump", {"where": [{"column": "a", "op": "=", "val": "x"}]},
     "Additional properties are not allowed ('val' was unexpected)"),
    ("dblog_dump", {"where": [{"column": "a", "op": "=", "value": True}]},
     "True is not of type 'string', 'number'"),
    ("dblog_dump", {"where": [{"op": "is null"}]}, "'column' is a required property"),
    ("dblog_repair", {"table": "public.orders", "from_key": 10},
     "10 is not of type 'string', 'null'"),
    ("dblog_backfill", {"where": [["region", "=", "EU"]]}, "is not of type 'object'"),
]


@pytest.mark.parametrize(("dag_id", "conf", "message"), FILTER_INVALID)
def test_the_forms_refuse_a_malformed_filter(dags: dict[str, DAG], dag_id: str,
                                             conf: dict[str, Any], message: str) -> None:
    with pytest.raises(ParamValidationError) as refused:
        resolve(dags[dag_id], conf)
    field = next(k for k in conf if k != "table")
    assert str(refused.value).startswith(f"Invalid input for param {field}: ")
    assert message in str(refused.value)


@pytest.mark.parametrize(("dag_id", "conf", "message"), INVALID)
def test_the_forms_refuse(dags: dict[str, DAG], dag_id: str, conf: dict[str, Any],
                          message: str) -> None:
    with pytest.raises(ParamValidationError) as refused:
        resolve(dags[dag_id], conf)
    text = str(refused.value)
    assert message in text
    if conf:  # the message names the field and shows its title: what is expected
        field = next(iter(conf))
        assert f"param {field}" in text or field == "table"
        assert "'title'" in text or "does not match" in text


def test_a_refusal_reads_well(dags: dict[str, DAG]) -> None:
    with pytest.raises(ParamValidationError) as refused:
        resolve(dags["dblog_dump"], {"chunk_size": 0})
    assert str(refused.value).startswith(
        "Invalid input for param chunk_size: 0 is less than the minimum of 1")
    assert "'title': 'Chunk size: rows per chunk SELECT, 1 to 100,000'" in str(refused.value)
    with pytest.raises(ParamValidationError) as refused:
        resolve(dags["dblog_dump"], {"tables": ["orders"]})
    assert "'description': 'a table: schema.table, e.g. public.orders'" in str(
        refused.value)


# -- the dump form's check: rules that join fields ---------------------------------------


@pytest.mark.parametrize(("scope", "tables", "keys", "expected"), [
    ("all", [], None, ("all", [], None)),
    ("all", None, "  ", ("all", [], None)),
    ("tables", ["public.a", "public.b"], None, ("tables", ["public.a", "public.b"], None)),
    ("keys", ["public.a"], " [1, 2] ", ("keys", ["public.a"], "[1, 2]")),
    ("keys", ["public.a"], '[[7, "EU"]]', ("keys", ["public.a"], '[[7, "EU"]]')),
])
def test_check_dump_accepts(scope: str, tables: list[str] | None, keys: str | None,
                            expected: tuple[str, list[str], str | None]) -> None:
    form = check_dump(scope, tables, keys)
    assert (form.scope, form.tables, form.keys) == expected


@pytest.mark.parametrize(("scope", "tables", "keys", "message"), [
    ("all", ["public.a"], None,
     "The dump form is refused: kind all dumps every captured table: leave the tables out, "
     "or use kind tables to dump only public.a (scope is the kind)."),
    ("tables", [], None, "kind tables needs at least one table"),
    ("tables", ["public.a"], "[1]",
     "keys were given with kind tables: use kind keys and one table to dump primary keys"),
    ("keys", [], "[1]", "kind keys needs at least one table"),
    ("keys", ["public.a", "public.b"], "[1]",
     "a primary-key dump (kind keys) names exactly one table, got 2"),
    ("keys", ["public.a"], None, "kind keys needs keys: keys must be a non-empty JSON array"),
    ("keys", ["public.a"], "[1, 2", "Keys are not valid JSON (Expecting ',' delimiter at "
                                    "line 1, column 6)."),
    ("keys", ["public.a"], "[]", "kind keys needs keys"),
    ("keys", ["public.a"], "{}", "keys must be a non-empty JSON array"),
    ("everything", [], None, 'kind must be one of all, tables, keys, got "everything"'),
])
def test_check_dump_refuses(scope: str, tables: list[str], keys: str | None,
                            message: str) -> None:
    with pytest.raises(ValueError) as refused:
        check_dump(scope, tables, keys)
    assert message in str(refused.value)


WHERE = [{"column": "region", "op": "in", "values": ["EU", "US"]},
         {"column": "qty", "op": ">", "value": 3}]


def test_check_dump_carries_the_filter() -> None:
    form = check_dump("tables", ["public.a"], None, WHERE, " 10 ", "abc")
    assert form.row_filter is not None
    assert form.row_filter.describe() == ('region in ("EU", "US") AND qty > "3" AND '
                                          'key >= ["10"] AND key <= ["abc"]')
    assert json.loads(form.spec.to_json()) == {
        "kind": "tables", "tables": ["public.a"], "keys": None, "chunk_size": 5000,
        "delay_ms": 0, "parallelism": 1, "client_token": None, "throttle": None,
        "prune": False, "priority": None,
        "where": [{"column": "region", "op": "in", "values": ["EU", "US"]},
                  {"column": "qty", "op": ">", "value": "3"}],
        "from_key": ["10"], "to_key": ["abc"]}
    assert DumpSpec.from_json(form.spec.to_json()) == form.spec
    assert json.loads(check_dump("all", [], None, [{"column": "deleted_at", "op": "is null"}],
                                 "", None).spec.to_json())["where"] == [
        {"column": "deleted_at", "op": "is null"}]
    plain = check_dump("tables", ["public.a"], None, [], "  ", None)
    assert plain.row_filter is None
    assert json.loads(plain.spec.to_json())["where"] is None


def test_check_dump_takes_the_forms_knobs_and_priority() -> None:
    form = {"chunk_size": 70, "delay_ms": 5, "parallelism": 2, "priority": "background",
            "throttle_max_chunk_ms": 40, "throttle_max_active_sessions": 0,
            "throttle_max_replica_lag_ms": 0, "throttle_max_log_lag_mb": 0}
    spec = check_dump("all", [], None, pace=form, delay_ms=900).spec
    assert (spec.chunk_size, spec.delay_ms, spec.parallelism, spec.priority) == (
        70, 900, 2, Priority.BACKGROUND)
    assert spec.throttle.limits()["max_chunk_ms"] == 40
    unthrottled = check_dump("keys", ["public.a"], "[1]", pace={**form, "priority": None,
                                                                "throttle_max_chunk_ms": 0})
    assert (unthrottled.spec.throttle.on, unthrottled.spec.queue_priority) == (
        False, Priority.URGENT)
    with pytest.raises(ValueError, match="priority must be one of urgent, normal, background"):
        check_dump("all", [], None, pace={"priority": "soon"})


@pytest.mark.parametrize(("scope", "tables", "keys", "where", "from_key", "to_key", "message"), [
    ("tables", ["public.a", "public.b"], None, None, "1", None,
     "The dump form is refused: a key range (from_key, to_key) is of one table's key: use "
     "kind tables with one table, got 2 tables (scope is the kind)."),
    ("all", [], None, None, None, "9", "got kind all"),
    ("keys", ["public.a"], "[1]", WHERE, None, None,
     "a primary-key dump reads the keys it names: give it no where"),
    ("tables", ["public.a"], None, [{"column": "a", "op": "is null", "value": "x"}], None,
     None, "a is null takes no value, got 1"),
    ("tables", ["public.a"], None, [{"column": "a", "op": "="}], None, None,
     "a = takes one value, got 0"),
    ("tables", ["public.a"], None, None, "[1, 2]", "[3]",
     "from_key has 2 value(s) but to_key 1"),
])
def test_check_dump_refuses_a_filter(scope: str, tables: list[str], keys: str | None,
                                     where: list[Any] | None, from_key: str | None,
                                     to_key: str | None, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        check_dump(scope, tables, keys, where, from_key, to_key)
    assert message in str(refused.value)


def test_templates_of_a_filter_render_with_the_runs_dates_only(dags: dict[str, DAG]) -> None:
    start = datetime(2026, 11, 16, tzinfo=ZoneInfo("UTC"))
    context = {"dag": dags["dblog_backfill"], "data_interval_start": start,
               "data_interval_end": start + timedelta(days=7), "ds": "2026-11-16",
               "prev_start_date_success": None, "conn": "secret", "var": "secret"}
    where = [{"column": "updated_at", "op": ">=", "value": "{{ data_interval_start }}"},
             {"column": "region", "op": "in", "values": ["EU", "{{ ds }}", 3]}]
    assert render_templates([where, "{{ data_interval_end | ds }}", None], context) == [
        [{"column": "updated_at", "op": ">=", "value": "2026-11-16 00:00:00+00:00"},
         {"column": "region", "op": "in", "values": ["EU", "2026-11-16", 3]}],
        "2026-11-23", None]
    assert render_templates("{{ prev_start_date_success or ds }}", context) == "2026-11-16"
    for template, message in [
        ("{{ conn }}", "'conn' is undefined"),
        ("{{ var }}", "'var' is undefined"),
        ("{{ prev_start_date_success }}", "an expression gives None"),
        ("{{ ds", "unexpected end of template"),
    ]:
        with pytest.raises(ValueError) as refused:
            render_templates([{"column": "c", "op": "=", "value": template}], context)
        assert str(refused.value).startswith(
            f"The template {template} in the filter cannot be rendered: ")
        assert message in str(refused.value)


@pytest.fixture
def store(redis_url: str, dblog_connection: DblogConnection) -> Iterator[StateStore]:
    dblog_connection(redis_url, "shop")
    state = StateStore(redis_url, "shop")
    yield state
    state.close()


def submit_after(dag: DAG, plan: Any, context: Context, store: StateStore) -> DumpRequest:
    """The request the DAG's submit task queues when the first task's XCom is ``plan``."""
    ti: Any = context["ti"]
    ti.xcom_pull = lambda task_ids: plan
    submit = copy.deepcopy(dag.task_dict["submit"])
    assert isinstance(submit, DblogDumpOperator)
    submit.render_template_fields(context)
    return store.get_request(submit.execute(context))


def run_check(dag: DAG, conf: dict[str, Any], task_context: Callable[..., Context],
              **variables: Any) -> tuple[Any, Context]:
    context = task_context(dag_id=dag.dag_id, task_id="submit", params=resolve(dag, conf))
    context.update({"dag": dag, **variables})  # type: ignore[typeddict-item]
    return dag.task_dict["check"].python_callable(**context), context  # type: ignore[union-attr]


def test_the_dump_form_filter_reaches_the_request(
        dags: dict[str, DAG], store: StateStore, task_context: Callable[..., Context]) -> None:
    dag = dags["dblog_dump"]
    plan, context = run_check(dag, {"scope": "tables", "tables": ["public.orders"],
                                    "where": WHERE, "from_key": "10", "to_key": "[20]"},
                              task_context)
    request = submit_after(dag, plan, context, store)
    assert (request.kind, request.tables) == (DumpKind.TABLES, ("public.orders",))
    assert request.row_filter is not None and request.row_filter.describe() == (
        'region in ("EU", "US") AND qty > "3" AND key >= ["10"] AND key <= ["20"]')
    with pytest.raises(AirflowFailException, match="got 2 tables"):
        run_check(dag, {"scope": "tables", "tables": ["public.a", "public.b"], "to_key": "9"},
                  task_context)


def test_the_backfill_renders_its_filter_for_the_request(
        dags: dict[str, DAG], store: StateStore, task_context: Callable[..., Context]) -> None:
    dag = dags["dblog_backfill"]
    start = datetime(2026, 11, 16, tzinfo=ZoneInfo("UTC"))
    since = [{"column": "updated_at", "op": ">=", "value": "{{ data_interval_start }}"}]
    plan, context = run_check(dag, {"scope": "tables", "tables": ["public.orders"],
                                    "where": since}, task_context, data_interval_start=start)
    assert json.loads(plan)["delay_ms"] == 0
    request = submit_after(dag, plan, context, store)
    assert (request.kind, request.tables, request.delay_ms, request.priority) == (
        DumpKind.TABLES, ("public.orders",), 0, Priority.BACKGROUND)
    assert request.row_filter is not None
    assert request.row_filter.describe() == 'updated_at >= "2026-11-16 00:00:00+00:00"'
    # a run triggered by hand has no data interval: refused with a sentence
    with pytest.raises(AirflowFailException, match="an expression gives None"):
        run_check(dag, {"scope": "all", "where": since}, task_context,
                  data_interval_start=None)


def test_the_repair_dumps_the_keys_or_the_slice(
        dags: dict[str, DAG], store: StateStore, task_context: Callable[..., Context]) -> None:
    dag = dags["dblog_repair"]
    context = task_context(dag_id=dag.dag_id, task_id="submit",
                           params=resolve(dag, {"table": "public.orders"}))
    keys = {"spec": check_dump("keys", ["public.orders"], "[5, 7]").spec.to_json(),
            "extra": []}
    by_keys = submit_after(dag, keys, context, store)
    assert (by_keys.kind, by_keys.key_count, by_keys.row_filter) == (DumpKind.KEYS, 2, None)
    assert by_keys.priority is Priority.URGENT
    sliced = {"spec": check_dump("tables", ["public.orders"], None, WHERE, None, "100",
                                 priority="normal").spec.to_json(), "extra": []}
    context = task_context(dag_id=dag.dag_id, run_id="other", task_id="submit",
                           params=resolve(dag, {"table": "public.orders"}))
    by_slice = submit_after(dag, sliced, context, store)
    assert (by_slice.kind, by_slice.tables, by_slice.key_count) == (
        DumpKind.TABLES, ("public.orders",), 0)
    assert by_slice.row_filter is not None and by_slice.row_filter.describe() == (
        'region in ("EU", "US") AND qty > "3" AND key <= ["100"]')
    assert by_slice.priority is Priority.NORMAL


# -- the backfill's pace ------------------------------------------------------------------


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 23, hour, minute, tzinfo=ZoneInfo("Europe/Paris"))


def test_busy_hours() -> None:
    assert parse_busy_hours("08-18") == (8, 18)
    assert parse_busy_hours(" 22-06 ") == (22, 6)
    assert parse_busy_hours("") is None and parse_busy_hours(None) is None
    assert parse_busy_hours("00-24") == (0, 24)
    for bad in ("8-18", "08:00-18:00", "08-08", "24-06", "00-24x", "06-25"):
        with pytest.raises(ValueError):
            parse_busy_hours(bad)
    day = Pace(delay_ms=0, busy_delay_ms=500, busy_hours=(8, 18))
    assert [day.delay_at(at(h)) for h in (7, 8, 17, 18)] == [0, 500, 500, 0]
    night = Pace(delay_ms=0, busy_delay_ms=500, busy_hours=(22, 6))
    assert [night.delay_at(at(h)) for h in (21, 22, 0, 5, 6)] == [0, 500, 500, 500, 0]
    assert Pace(10, 500, None).delay_at(at(12)) == 10


def test_pace_moves_its_own_delays_and_leaves_a_delay_set_by_hand() -> None:
    pace = Pace(delay_ms=0, busy_delay_ms=500, busy_hours=(8, 18))
    assert pace.next_delay(0, at(9)) == 500  # busy hours began
    assert pace.next_delay(500, at(9)) is None  # already right
    assert pace.next_delay(500, at(19)) == 0  # busy hours ended
    assert pace.next_delay(2000, at(9)) is None  # someone ran `dblog set --delay-ms 2000`
    assert Pace(delay_ms=0, busy_delay_ms=500, busy_hours=None).next_delay(500, at(9)) is None


def test_the_pace_sensor_sets_the_delay_of_the_hour(
        redis_url: str, dblog_connection: DblogConnection,
        task_context: Callable[..., Context], log_text: Callable[[], str]) -> None:
    dblog_connection(redis_url, "shop")
    state = StateStore(redis_url, "shop")
    try:
        request = state.create_request(DumpKind.TABLES, ["public.a"], chunk_size=100,
                                       delay_ms=0)
        state.transition(request.id, RequestState.RUNNING)
        sensor = DumpPaceSensor(task_id="pace", request_id=request.id,
                                dblog_conn_id="dblog_default", timezone="Europe/Paris")
        form = {"delay_ms": 0, "busy_delay_ms": 700, "busy_hours": "00-24"}  # always busy
        context = task_context(params=form)
        assert sensor.poke(context) is False
        assert state.get_request(request.id).delay_ms == 700
        state.set_knobs(request.id, delay_ms=2500)  # by hand
        assert sensor.poke(context) is False
        assert state.get_request(request.id).delay_ms == 2500
        assert f"{request.id}: delay 2500 ms was set by hand; left as it is" in log_text()
        state.transition(request.id, RequestState.COMPLETED)
        assert sensor.poke(context) is True
    finally:
        state.close()


def test_the_pace_waits_deferred_on_the_dump_and_ends_with_it(
        redis_url: str, dblog_connection: DblogConnection,
        task_context: Callable[..., Context]) -> None:
    """Between two settings the pace defers to the dump's trigger, which wakes it for the
    next setting or when the dump ends: the run ends with its dump, not at the next poke."""
    dblog_connection(redis_url, "shop")
    state = StateStore(redis_url, "shop")
    try:
        request = state.create_request(DumpKind.TABLES, ["public.a"], chunk_size=100,
                                       delay_ms=0)
        state.transition(request.id, RequestState.RUNNING)
        sensor = DumpPaceSensor(task_id="pace", request_id=request.id,
                                dblog_conn_id="dblog_default", poll_interval=2,
                                timeout=3600)
        context = task_context(params={"delay_ms": 0, "busy_delay_ms": 700,
                                       "busy_hours": "00-24"})
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute(context)
        assert state.get_request(request.id).delay_ms == 700  # set before it defers
        trigger = deferred.value.trigger
        assert isinstance(trigger, DblogDumpTrigger)
        assert trigger.serialize()[1] == {"request_id": request.id,
                                          "dblog_conn_id": "dblog_default",
                                          "poll_interval": 2.0, "wake_after": 300.0,
                                          "log_progress": False}
        assert deferred.value.method_name == "execute_complete"
        with pytest.raises(TaskDeferred):  # woken for the next setting: set, defer again
            sensor.execute_complete(context, {"status": "running",
                                              "request_id": request.id})
        state.transition(request.id, RequestState.COMPLETED)
        # the dump ended: nothing more to pace, the task succeeds (no deferral, no error)
        sensor.execute_complete(context, {"status": "completed",
                                          "message": f"{request.id} completed"})
        with pytest.raises(AirflowException, match="cannot follow"):
            sensor.execute_complete(context, {"status": "error", "message": "cannot follow"})
    finally:
        state.close()


# -- settings from the environment --------------------------------------------------------


def test_settings() -> None:
    assert settings.env_str("X", "d", {"X": "  "}) == "d"
    assert settings.env_int("N", 7, 0, 10, {}) == 7
    assert settings.env_int("N", 7, 0, 10, {"N": "1_0"}) == 10
    assert settings.conn_ids("C", "a", {"C": "b, a,b"}) == ["b", "a"]
    assert settings.env_tables("T", {"T": "public.a, shop.b,public.a"}) == ["public.a", "shop.b"]


def test_settings_come_from_the_dblog_section_first(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {"AIRFLOW__DBLOG__POLL_INTERVAL_S": "5", "DBLOG_POLL_INTERVAL_S": "7"}
    assert settings.env_int("DBLOG_POLL_INTERVAL_S", 10, 1, 3600, environ) == 5
    assert settings.env_int("DBLOG_POLL_INTERVAL_S", 10, 1, 3600,
                            {"DBLOG_POLL_INTERVAL_S": "7"}) == 7  # the older name
    # through Airflow's configuration itself (airflow.cfg or AIRFLOW__DBLOG__*)
    monkeypatch.setenv("AIRFLOW__DBLOG__SPARK_CONN_ID", "spark_cluster")
    monkeypatch.setenv("DBLOG_SPARK_CONN_ID", "spark_old")
    assert settings.env_str("DBLOG_SPARK_CONN_ID", "spark_default") == "spark_cluster"
    monkeypatch.delenv("AIRFLOW__DBLOG__SPARK_CONN_ID")
    assert settings.env_str("DBLOG_SPARK_CONN_ID", "spark_default") == "spark_old"
    monkeypatch.delenv("DBLOG_SPARK_CONN_ID")
    assert settings.env_str("DBLOG_SPARK_CONN_ID", "spark_default") == "spark_default"


def test_captured_tables(tmp_path: Path) -> None:
    config = tmp_path / "w.toml"
    config.write_text('[source]\ntables = ["public.a", 3, "db.b"]\n[redis]\nurl = "x"\n')
    assert settings.captured_tables({"DBLOG_CONFIG": str(config)}) == ["public.a", "db.b"]
    config.write_text("[source\n")
    assert settings.captured_tables({"DBLOG_CONFIG": str(config)}) == []
    assert settings.captured_tables({}) == []


# -- removing extra target rows: the SQL ---------------------------------------------------


def test_extra_rows_sql() -> None:
    types = {"id": "bigint", "region": "text"}
    assert pg_target.row_position_sql("public.orders", ["id", "region"], types) == (
        'SELECT "_dblog_position" FROM "public"."orders" WHERE "id" = CAST(%s AS bigint)'
        ' AND "region" = CAST(%s AS text)')
    assert pg_target.delete_row_sql("public.orders", ["id"], types) == (
        'DELETE FROM "public"."orders" WHERE "id" = CAST(%s AS bigint)'
        ' AND "_dblog_position" IS NOT DISTINCT FROM %s')
    assert my_target.delete_row_sql("shop.orders", ["id", "region"]) == (
        "DELETE FROM `shop`.`orders` WHERE `id` = %s AND `region` = %s"
        " AND `_dblog_position` <=> %s")


def test_extra_rows_sql_doubles_percent_in_names_and_types() -> None:
    """Run with parameters: ``%`` in a name or a type is doubled for the driver."""
    types = {"i d%": '"ty%pe"', "a`b": "text"}
    assert pg_target.row_position_sql('p.t%s"', ["i d%", "a`b"], types) == (
        'SELECT "_dblog_position" FROM "p"."t%%s""" WHERE "i d%%" = CAST(%s AS "ty%%pe")'
        ' AND "a`b" = CAST(%s AS text)')
    assert my_target.delete_row_sql("db.t%s", ["i d%", "a`b"]) == (
        "DELETE FROM `db`.`t%%s` WHERE `i d%%` = %s AND `a``b` = %s"
        " AND `_dblog_position` <=> %s")


@pytest.fixture(autouse=True)
def _no_leaked_environment() -> Iterator[None]:
    before = {k: v for k, v in os.environ.items() if k.startswith("DBLOG_")}
    yield
    assert {k: v for k, v in os.environ.items() if k.startswith("DBLOG_")} == before
