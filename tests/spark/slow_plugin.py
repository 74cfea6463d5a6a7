"""A KIP-729-style plugin that takes its time, so a Spark job lasts long enough to be cancelled
from the ReplayPanel while its tasks run (tests/spark/test_replay_panel.py)."""

import time


def slow_accept(record):
    """Accept every record, 10 ms each."""
    time.sleep(0.01)
    return
