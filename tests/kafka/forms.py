"""Shared test helper: the byte-level validator's outcome in the tables' form."""

from __future__ import annotations


def with_ids(outcome: dict) -> list[dict]:
    """A byte-level outcome's (``BatchOutcome.to_dict()``) record errors as the verdict tables
    hold them: KIP-467's wire form plus the check, rule and parameters that identify each."""
    return [{**e, "check": i["check"], "rule": i["rule"],
             "params": None if i["params"] is None else list(i["params"].items())}
            for e, i in zip(outcome["record_errors"], outcome["record_error_ids"], strict=True)]
