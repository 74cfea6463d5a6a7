"""Samples for the widget tests: the demo ``orders`` topic (3 partitions) with its shipped
policy, and the small JSON sample of ``tests/viz`` that holds sensitive data."""

from __future__ import annotations

import os

import pytest

from tests.viz.conftest import (  # noqa: F401  (the viz fixture, under this suite's name)
    NOW,
    SECRET_EMAIL,
    SECRET_KEY,
    SECRET_TOKEN,
    SENSITIVE_POLICY,
)
from tests.viz.conftest import sensitive_sample as _sensitive_sample

#: the JSON sample with sensitive data (the same fixture as tests/viz)
secrets_sample = _sensitive_sample


@pytest.fixture(scope="session")
def orders_dir(tmp_path_factory):
    """``(log directory of the demo orders partitions, orders policy)``."""
    from kqlab.sources import demo_topics

    demo = demo_topics.generate(tmp_path_factory.mktemp("demo"), NOW, scale=0.5)
    root = tmp_path_factory.mktemp("orders-only")
    for name, folder in demo.folders.items():
        if name.rsplit("-", 1)[0] == "orders":
            os.symlink(folder, root / name)
    return root, demo_topics.load_policies()["orders"]


SECRETS = (SECRET_EMAIL, SECRET_KEY, SECRET_TOKEN)
