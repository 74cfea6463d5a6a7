"""The real broker as the oracle of kqlab's broker verdicts (issue 27; docs/broker-oracle.md).

:mod:`~kqlab.kafka.oracle.wire` sends exact produce bytes over a raw socket;
:mod:`~kqlab.kafka.oracle.cases` builds the differential cases (fixed-seed, every check family);
:mod:`~kqlab.kafka.oracle.compare` runs them on a broker and on kqlab and compares the answers.
Nothing here is imported by ``import kqlab``.
"""
