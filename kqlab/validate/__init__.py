"""The full batch validator: broker checks plus a policy's rules, and the verdicts they give."""

from kqlab.validate.framing import reconstruct_framing
from kqlab.validate.loading import load_sample
from kqlab.validate.replayer import Replayer, replay
from kqlab.validate.sample import ReplayError, Sample
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
