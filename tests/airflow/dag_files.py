"""The repository's dags folder, parsed as Airflow's DAG processor parses it."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping

from airflow.dag_processing.dagbag import BundleDagBag
from airflow.sdk import DAG

from tests.airflow.conftest import ROOT

__all__ = ["DAGS", "dag_bag", "load_dags"]

DAGS = ROOT / "dags"
if str(DAGS) not in sys.path:  # as Airflow does for the dags folder (a bundle's path)
    sys.path.append(str(DAGS))


def dag_bag(environ: Mapping[str, str] | None = None) -> BundleDagBag:
    """Parse the dags folder in this process, with ``environ`` added to the environment
    while the files run (they read their settings from it)."""
    saved = dict(os.environ)
    os.environ.update(environ or {})
    try:
        with warnings.catch_warnings():
            # Airflow's .airflowignore reader (glob syntax) uses a pathspec class that
            # pathspec deprecates; not ours to fix.
            warnings.filterwarnings("ignore", "GitWildMatchPattern", DeprecationWarning)
            return BundleDagBag(dag_folder=DAGS, bundle_path=DAGS, bundle_name="dags-folder")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def load_dags(environ: Mapping[str, str] | None = None) -> dict[str, DAG]:
    """The DAGs of the dags folder, by id; every file must import."""
    bag = dag_bag(environ)
    assert bag.import_errors == {}, bag.import_errors
    return dict(bag.dags)
