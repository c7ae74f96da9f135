"""The provider as Airflow finds it: its entry point and provider info, the connection
type, and a plugins folder scan that leaves the package alone."""

from __future__ import annotations

import re
import sys
from importlib.metadata import entry_points
from pathlib import Path

import dblog_airflow
from airflow.providers_manager import ProvidersManager
from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime
from dblog_airflow.hooks.dblog import DblogHook

from tests.airflow.conftest import ROOT


def test_provider_info_is_found_and_valid() -> None:
    [entry] = [e for e in entry_points(group="apache_airflow_provider")
               if e.value.startswith("dblog_airflow:")]
    info = entry.load()()
    assert info == dblog_airflow.get_provider_info()
    assert info["package-name"] == "dblog"  # Airflow requires the distribution's name
    for group in ("hooks", "operators", "sensors", "triggers"):
        for entry_info in info[group]:
            for module in entry_info["python-modules"]:
                __import__(module)
    [connection] = info["connection-types"]
    assert connection["hook-class-name"] == f"{DblogHook.__module__}.{DblogHook.__name__}"
    assert connection["connection-type"] == DblogHook.conn_type == "dblog"


def test_airflow_knows_the_connection_type() -> None:
    # Airflow validates the provider info against its schema when it discovers it
    runtime = ProvidersManagerTaskRuntime()  # type: ignore[no-untyped-call]  # unannotated
    hook = runtime.hooks["dblog"]
    assert hook is not None
    assert (hook.hook_class_name, hook.connection_id_attribute_name, hook.package_name) == (
        "dblog_airflow.hooks.dblog.DblogHook", "dblog_conn_id", "dblog")


def test_plugins_folder_scan_leaves_the_package_alone() -> None:
    from airflow import plugins_manager, settings

    assert settings.PLUGINS_FOLDER is not None
    assert Path(settings.PLUGINS_FOLDER) == ROOT / "plugins"
    assert plugins_manager.get_import_errors() == {}
    # without plugins/.airflowignore the scan imports every module again as a top-level
    # module named after its file: sys.modules["merge"], ["verify"], ["dump"], ...
    for name in ("dump", "control", "merge", "verify", "dblog", "_errors", "__init__"):
        module = sys.modules.get(name)
        assert module is None or "dblog_airflow" not in str(getattr(module, "__file__", ""))
    assert str(ROOT / "plugins") in sys.path


def test_airflow_knows_the_extra_link_and_the_config_section() -> None:
    manager = ProvidersManager()  # type: ignore[no-untyped-call]  # unannotated
    assert "dblog_airflow.links.DblogLiveViewLink" in manager.extra_links_class_names
    configs = dict(manager.provider_configs)
    options = configs["dblog"]["dblog"]["options"]  # by provider, then by section
    assert {"conn_id", "config", "spark_conn_id", "poll_interval_s", "task_retries",
            "merge_schedule", "backfill_where"} <= set(options)
    # every DBLOG_* setting the DAGs read is an option of the section
    read = set(re.findall(r'"DBLOG_([A-Z_]+)"', "".join(
        path.read_text() for path in (ROOT / "dags").rglob("*.py"))))
    assert {name.lower() for name in read} <= set(options)
