"""A structure-aware Kafka batch generator and mutator, shared by kqlab's fuzzers.

:mod:`~kqlab.kafka.fuzz.seeds` (batches as fields, encoding), :mod:`~kqlab.kafka.fuzz.corpus`
(the deterministic seed corpus) and :mod:`~kqlab.kafka.fuzz.mutate` (structural and byte
mutations, producer runs, :func:`~kqlab.kafka.fuzz.mutate.make_case`).  Used by
``scripts/fuzz_validator.py`` (kqlab's engines against each other) and the broker oracle
(kqlab against the real broker).  Nothing here is imported by ``import kqlab``.
"""
