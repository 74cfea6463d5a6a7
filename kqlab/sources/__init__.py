"""Where samples come from: log segments, snapshots, live topics and the built-in demo data.

On disk: :mod:`~kqlab.sources.segments` (log segment folders), :mod:`~kqlab.sources.files`
(snapshots: Parquet + ``snapshot.json``).  Live topics, top down:
:mod:`~kqlab.sources.kafka_snapshot` (a topic streamed into a snapshot),
:mod:`~kqlab.sources.kafka` (:func:`~kqlab.sources.kafka.sample`, the public names),
:mod:`~kqlab.sources.kafka_offsets` (partitions, watermarks, plans, time windows),
:mod:`~kqlab.sources.fetch` (exact framing with raw Fetch requests),
:mod:`~kqlab.sources.kafka_consume` (the consumer read), :mod:`~kqlab.sources.kafka_client`
(client configs), :mod:`~kqlab.sources.kafka_errors`, :mod:`~kqlab.sources.sample_tables`
(filters, caps, sizes), :mod:`~kqlab.sources.sample_result`, :mod:`~kqlab.sources.progress`.
Demo data: :mod:`~kqlab.sources.demo` (one partition), :mod:`~kqlab.sources.demo_topics`.
"""
