"""Lake targets: the merge into Apache Iceberg and Delta Lake tables, run by Spark.

A lake target has no database connection of its own: the Spark job's session creates
the tables, stages each batch as a DataFrame and applies it with one ``MERGE INTO``
whose commit also carries the merge log (:mod:`.target`). What differs between the
formats — naming a table, creating it, the commit's metadata, reading the merge log
back — is :mod:`.iceberg` and :mod:`.delta`; :mod:`.types` maps source columns to Spark
types and row-image texts to values; :mod:`.read` reads a lake table without a JVM
(pyiceberg, deltalake), for ``dblog verify`` and the tests.
"""
