"""The full batch validator: broker checks plus a policy's rules, and the verdicts they give."""

from kqlab.validate.replay import (
    Replayer,
    ReplayError,
    Sample,
    load_sample,
    reconstruct_framing,
    replay,
)
from kqlab.validate.verdicts import (
    RECORD_VERDICTS_SCHEMA,
    REPLAY_BATCHES_SCHEMA,
    Verdicts,
    producer_action,
)

__all__ = [
    "RECORD_VERDICTS_SCHEMA",
    "REPLAY_BATCHES_SCHEMA",
    "ReplayError",
    "Replayer",
    "Sample",
    "Verdicts",
    "load_sample",
    "producer_action",
    "reconstruct_framing",
    "replay",
]
