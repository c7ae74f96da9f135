"""Merge targets: the databases ``dblog merge`` writes landed events into.

:mod:`.columns` maps a source column to a target column type through a neutral
logical type; :mod:`.base` is what the merge needs of a target database, which each
kind implements in its own package (``pg/target.py``, ``mysql/target.py``, opened
through its dialect); :mod:`.plan` picks the batches of landed segments (read through
the sink seam's reader), :mod:`.merge` applies a staged batch in one transaction,
recording it in the merge log; :mod:`.submit` builds the spark-submit line.
"""
