"""What the worker is doing, for people and for Prometheus: status, metrics, and a feed.

The worker thread writes through the hooks of :class:`Telemetry`, a few calls per poll,
per window and per flush, never per event (the log runs at >100k events/s). HTTP threads
read:

* :meth:`Telemetry.snapshot`: the runtime status as JSON-ready values;
* :meth:`Telemetry.exposition`: the metrics through prometheus_client, in the Prometheus
  text format 0.0.4 or OpenMetrics as the scraper asks
  (every name, type and label is in ``docs/observability.md``);
* :meth:`Telemetry.feed`: a bounded, ordered ring of what happened (log batches,
  windows opening and closing, durable writes, dumps, sessions), each entry with a
  sequence number, so that a reader asks for what came after the last one it saw.

One lock, the facade's, guards both sides. Event counts come from the output buffer's
per-table totals (:meth:`OutputBuffer.log_events_by_table`) and from what a write made
durable, so nothing here looks at single events except a few samples per feed line.

The facade (:mod:`.facade`) is made of one collaborator per part of the state, none of
them locked or clocked by itself:

* :mod:`.lifecycle`: the lease, the sessions, the failures;
* :mod:`.checkpoint`: the position read and the checkpoint saved;
* :mod:`.landed` and :mod:`.lag`: what writes made durable, how fast, how late;
* :mod:`.windows`: the watermark windows and their chunk rows;
* :mod:`.dump_progress` (with :mod:`.key_ratio`): the running dump, its ratios and ETAs;
* :mod:`.feed` and :mod:`.log_lines`: the feed, and its lines of log events read;
* :mod:`.exposition`: the metric families and their collector; :mod:`.positions`: a
  position as text.
"""

from dblog_worker.telemetry.facade import Telemetry

__all__ = ["Telemetry"]
