"""dblog's Spark jobs (installed as the ``dblog_spark`` package).

``merge.py`` merges the landing zone into target tables; run it with
``dblog merge`` or ``spark-submit spark/merge.py --config FILE`` (docs/merge.md).
"""
