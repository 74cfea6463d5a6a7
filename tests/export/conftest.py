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
