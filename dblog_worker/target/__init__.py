"""Merge targets: the databases ``dblog merge`` writes landed events into.

:mod:`.columns` maps a source column to a target column type and to the SQL that
turns its canonical JSON text into that type; :mod:`.postgres` and :mod:`.mysql`
hold each target's SQL; :mod:`.merge` plans batches of segments and applies a
staged batch in one transaction, recording it in the merge log.
"""
