"""Tests of the Airflow provider (plugins/dblog_airflow) and the DAGs."""
