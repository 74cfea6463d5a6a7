"""Shared fixtures of the exporter tests: the demo topics, their policies, one broker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kqlab.sources.demo_topics import generate, load_policies

NOW = 1763700000000
TODAY = "2026-11-21"


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """The demo topics, with one folder per topic (links to its partition folders)."""
    root = tmp_path_factory.mktemp("export-demo")
    topics = generate(root / "all", NOW)
    for topic in ("orders", "clicks"):
        (root / topic).mkdir()
        for folder in topics.partitions(topic):
            os.symlink(folder, root / topic / folder.name)
    return root


@pytest.fixture(scope="session")
def policies(demo):
    return load_policies()


@pytest.fixture(scope="session")
def replayers(demo, policies):
    from kqlab.validate.replayer import Replayer

    return {t: Replayer(Path(demo) / t, now=NOW) for t in ("orders", "clicks")}


@pytest.fixture(scope="session")
def vetted(replayers, policies):
    """The shipped policies with the provenance of a replay of their demo topic."""
    return {t: replayers[t].run(p).vet(p, source=f"demo/{t}", today=TODAY)
            for t, p in policies.items()}


@pytest.fixture(scope="session")
def broker():
    from kqlab.embedded import broker as embedded

    with embedded() as b:
        yield b


# ------------------------------------------------------------------ samples built for a test

def write_partition(folder: Path, records: list[dict]) -> Path:
    """A partition folder (``<folder>/00000000000000000000.log``) holding ``records`` (dicts
    with ``value`` and optional ``key``, ``headers``), one batch each, offsets from 0, as a
    producer without transactions would have them stored."""
    from kqlab.kafka.builder import BatchBuilder, Record

    folder.mkdir(parents=True, exist_ok=True)
    data = b""
    for i, rec in enumerate(records):
        b = BatchBuilder(base_offset=i, base_timestamp=NOW - 60_000 + i)
        b.append(Record(value=rec.get("value"), key=rec.get("key"),
                        headers=tuple(rec.get("headers", ()))))
        data += b.build()
    (folder / "00000000000000000000.log").write_bytes(data)
    return folder


def confluent_avro(schema: dict, datum: dict, schema_id: int = 1) -> bytes:
    """``datum`` in the Confluent wire format (magic byte 0, schema id, Avro body)."""
    import io
    import struct

    import fastavro

    buf = io.BytesIO()
    buf.write(b"\0" + struct.pack(">i", schema_id))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


@pytest.fixture(scope="session")
def tansu_broker():
    """A Tansu broker, for the tests of what kqlab does with Tansu's own answers
    (issue 27: those not yet green on Apache Kafka)."""
    from kqlab.embedded import TansuBroker

    with TansuBroker() as b:
        yield b
