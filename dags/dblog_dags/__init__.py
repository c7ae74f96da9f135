"""What the dblog DAG files share: settings from the environment, the form's Params, the
check of a dump form, the pace of a backfill, and the removal of extra target rows.

Everything a DAG file calls at parse time reads environment variables (and the table names
of ``$DBLOG_CONFIG``) only; nothing here touches a database, Redis or Airflow's metadata
until a task runs.
"""
