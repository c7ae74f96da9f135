"""The landing zone: the worker's durable output, behind the sink seam.

* :mod:`~dblog_worker.landing.sink` — the seam: :class:`Sink` (the worker writes),
  :class:`LandedReader` (the merge, Spark and tools read), the registry of formats.
* :mod:`~dblog_worker.landing.arrow` — a segment's columns as Arrow, for every format.
* :mod:`~dblog_worker.landing.names` — a table's folder name.
* :mod:`~dblog_worker.landing.files` — atomic, fsynced file publication.
* :mod:`~dblog_worker.landing.parquet` and :mod:`~dblog_worker.landing.parquet_files` —
  the Parquet format (``LandingZone``).

Nothing is imported here: the configuration checks table names with ``names`` without
loading pyarrow.
"""
