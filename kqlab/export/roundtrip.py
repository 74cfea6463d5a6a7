"""What every round trip shares: the sample as the targets see it, and per-rule comparisons.

A round trip runs one enforcement target's *own engine* on the vetting sample and compares,
record by record, what it refuses with what the replay rejects.  The comparison is per rule
(:class:`RuleCheck`): each rule's export is judged on its own, so one rule that refuses nearly
everything cannot hide another rule's wrong export.  A rule's check covers only the records
the target can judge *for that rule* (``judged``): a record a target refuses before the rule
could run (undecodable for a rule reading fields, a tombstone where the value is required) is
excluded from that rule's comparison, with the reason counted — and compared under the rule
that does judge it (the decoding).

Never judged by anyone: records of control batches (transaction markers are written by the
transaction coordinator, never produced, and the replay applies no policy to them).

:class:`SampleView` holds what every round trip reads once: the records, the replay's result
per rule (the implicit checks included: :func:`~kqlab.export.base.implicit_rules`), each
value's decoding stage, and one example record per disagreement, rendered in a sentence with
its partition, offset and value — masked where the policy says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kqlab.export.base import DECODE_KEY, DECODE_VALUE, SCHEMA_ID, implicit_rules

if TYPE_CHECKING:
    import pyarrow as pa

    from kqlab.policy.model import Policy
    from kqlab.validate.replayer import Replayer

__all__ = ["CONTROL", "DECODE_VALUE", "RoundTrip", "RuleCheck", "SampleView", "compare",
           "compare_whole", "count_reasons", "replayer_of"]

#: the reason control records are never given to a target
CONTROL = "transaction marker (written by the coordinator, never produced)"
#: coordinates listed per disagreement (the counts are always complete)
_SHOWN = 20


@dataclass
class RuleCheck:
    """One rule through one target's engine on its own: the records the engine refused
    against those the replay rejects for that rule, over the ``judged`` records."""

    rule: str
    judged: int = 0
    refused: int = 0
    expected: int = 0
    #: (topic, partition, offset) the target refused and the replay accepts, and the reverse
    only_target: list[tuple[str, int, int]] = field(default_factory=list)
    only_replay: list[tuple[str, int, int]] = field(default_factory=list)
    #: records not judged for this rule, by reason
    excluded: dict[str, int] = field(default_factory=dict)
    #: refusals that were not the rule answering false (a rule that raised, a conversion)
    errors: dict[str, int] = field(default_factory=dict)
    #: one example record per direction: {"where": "orders-0@17", "value": "...", ...}
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: what ``judged`` counts (an admin policy's proof judges admin requests, not records)
    unit: str = "sampled records"

    @property
    def equal(self) -> bool:
        """The engine refused exactly the records the replay rejects for this rule."""
        return not self.only_target and not self.only_replay

    def sentences(self, target: str) -> list[str]:
        """Each disagreement in one sentence, with its example record."""
        out = []
        for side, coords in (("target", self.only_target), ("replay", self.only_replay)):
            if not coords:
                continue
            ex = self.examples.get(side, {})
            eg = f", e.g. {ex['where']}" if ex else ""
            if ex.get("key") is not None:
                eg += f" key {ex['key']}"
            if ex:
                eg += f" value {ex['value']}"
            if ex.get("why"):
                eg += f" ({ex['why']})"
            n = len(coords)
            records = "record" if n == 1 else "records"
            if side == "target":
                out.append(f"{target} refused {n} {records} the replay accepts for "
                           f"{self.rule}{eg}")
            else:
                out.append(f"{target} accepted {n} {records} the replay rejects for "
                           f"{self.rule}{eg}")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {"rule": self.rule, "equal": self.equal, "judged": self.judged,
                "refused": self.refused, "expected": self.expected,
                "only_target": [list(c) for c in self.only_target[:_SHOWN]],
                "only_target_count": len(self.only_target),
                "only_replay": [list(c) for c in self.only_replay[:_SHOWN]],
                "only_replay_count": len(self.only_replay),
                "excluded": self.excluded, "errors": self.errors, "examples": self.examples}


@dataclass
class RoundTrip:
    """One target's round trip: the per-rule checks, and the whole export run at once.

    ``ran`` is False when the target's engine cannot run here (``reason`` says precisely
    why).  The whole-export fields (``refused``, ``expected``, ``only_*``, ``by_rule``) compare
    the export as deployed — every rule together — with the replay's failures of the rules it
    enforces; ``checks`` hold each rule's own comparison, which is what a claim rests on.
    """

    target: str
    ran: bool
    reason: str = ""
    rules: list[str] = field(default_factory=list)
    records: int = 0
    judged: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    expected: int = 0
    agree: int = 0
    only_target: list[tuple[str, int, int]] = field(default_factory=list)
    only_replay: list[tuple[str, int, int]] = field(default_factory=list)
    by_rule: dict[str, int] = field(default_factory=dict)
    other_errors: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: the replay's count per compared rule, each record under its first failing rule in
    #: the target's order (comparable with ``by_rule`` where the target stops at the first)
    expected_by_rule: dict[str, int] = field(default_factory=dict)
    #: what judged the records on the target side (e.g. ``JSONSerializer``)
    serializer: str = ""
    #: rule id -> its own comparison
    checks: dict[str, RuleCheck] = field(default_factory=dict)
    #: rule id -> why it has no check although exported (e.g. nothing to run it on)
    unchecked: dict[str, str] = field(default_factory=dict)
    #: records refused by both sides but under another rule (targets that name the rule)
    attribution_differs: int = 0

    @property
    def whole_equal(self) -> bool:
        """The export as deployed refused exactly what the replay rejects."""
        return self.ran and not self.only_target and not self.only_replay and \
            self.refused == self.expected and not self.attribution_differs

    @property
    def equal(self) -> bool:
        """The whole export agrees with the replay, and so does every rule's own check."""
        return self.whole_equal and all(c.equal for c in self.checks.values())

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (timings excluded: they belong to the run, not the result)."""
        return {"target": self.target, "ran": self.ran, "reason": self.reason,
                "equal": self.equal, "whole_equal": self.whole_equal, "rules": self.rules,
                "records": self.records, "attribution_differs": self.attribution_differs,
                "judged": self.judged, "excluded": self.excluded, "refused": self.refused,
                "expected": self.expected, "agree": self.agree,
                "only_target": [list(c) for c in self.only_target[:_SHOWN]],
                "only_target_count": len(self.only_target),
                "only_replay": [list(c) for c in self.only_replay[:_SHOWN]],
                "only_replay_count": len(self.only_replay),
                "by_rule": self.by_rule, "expected_by_rule": self.expected_by_rule,
                "serializer": self.serializer, "other_errors": self.other_errors,
                "notes": self.notes,
                "checks": {k: c.to_dict() for k, c in self.checks.items()},
                "unchecked": self.unchecked}


class SampleView:
    """The vetting sample as the round trips give it to targets (see the module docstring)."""

    def __init__(self, policy: Policy, replayer: Replayer):
        from kqlab.validate.replayer import with_implicit_rules
        from kqlab.validate.sample import record_batch_rows

        self.policy = policy
        self.replayer = replayer
        self.records: pa.Table = replayer.sample.records
        self.n = self.records.num_rows
        self.now = replayer.now
        rows = record_batch_rows(self.records, replayer.sample.batches)
        control = replayer.sample.batches.column("is_control").to_numpy(zero_copy_only=False)
        self.control = control.astype(bool)[rows] if len(rows) else np.zeros(0, dtype=bool)
        self.effective = with_implicit_rules(policy)
        self.results = replayer.evaluate(self.effective)
        self.implicit = {r.id: r for r in implicit_rules(policy)}
        self.coords = list(zip(self.records.column("topic").to_pylist(),
                               self.records.column("partition").to_pylist(),
                               self.records.column("offset").to_pylist(), strict=True))
        self._datums: Any = None

    # -- the replay's side ---------------------------------------------------------------
    @property
    def datums(self) -> Any:
        """Every value decoded as the replay decodes it
        (:func:`kqlab.serde.datums.decode_datums`)."""
        if self._datums is None:
            from kqlab.serde.datums import decode_datums

            self._datums = decode_datums(self.records.column("value"), self.policy.value,
                                         self.replayer.resolver)
        return self._datums

    @property
    def value_null(self) -> np.ndarray:
        """True where the record has no value (a tombstone)."""
        return np.asarray(self.records.column("value").is_null().to_numpy(zero_copy_only=False),
                          dtype=bool)

    @property
    def key_null(self) -> np.ndarray:
        """True where the record has no key."""
        return np.asarray(self.records.column("key").is_null().to_numpy(zero_copy_only=False),
                          dtype=bool)

    @property
    def decodes(self) -> np.ndarray:
        """True where the value is present and decodes as the policy declares."""
        from kqlab.validate.rules import decodes

        if not decodes(self.policy.value):
            return ~self.value_null
        stages = self.datums.stages
        return np.array([s is None for s in stages], dtype=bool) & ~self.value_null

    def replay_failed(self, rule_id: str) -> np.ndarray:
        """The replay's failures of one rule (implicit pseudo-rules by their definition:
        keys are never decoded; the schema-id allowlist is the decoding's framing and
        schema stages)."""
        if rule_id == DECODE_KEY and DECODE_KEY not in self.results:
            return np.zeros(self.n, dtype=bool)
        if rule_id == SCHEMA_ID and SCHEMA_ID not in self.results:
            stages = self.datums.stages
            return np.array([s in ("framing", "schema") for s in stages], dtype=bool) & \
                ~self.value_null & ~self.control
        return np.asarray(self.results[rule_id].failed, dtype=bool) & ~self.control

    def rule(self, rule_id: str) -> Any:
        """The rule (or implicit pseudo-rule) with this id."""
        if rule_id in self.implicit:
            return self.implicit[rule_id]
        return self.effective.rule(rule_id)

    def decode_rule_ids(self) -> set[str]:
        """Ids of the rules that decide whether the value decodes (explicit or implicit)."""
        from kqlab.validate.rules import DECODE_KINDS

        return {r.id for r in self.effective.rules
                if r.kind in DECODE_KINDS and r.param("target") != "key"}

    # -- examples ------------------------------------------------------------------------
    def example(self, i: int, *, show_key: bool = False, why: str | None = None
                ) -> dict[str, Any]:
        """Record ``i`` for a sentence: where it is and its value (masked per the policy's
        ``sensitive`` section), its key when the rule is about keys."""
        from kqlab.viz._masking import MASK, masker

        m = masker(self.policy)
        topic, part, off = self.coords[i]
        raw = self.records.column("value")[i].as_py()
        fmt = self.policy.value.format
        datum = self.datums.values[i] if fmt in ("json", "avro", "protobuf") else None
        if fmt == "protobuf" and datum is not None:
            from kqlab.serde.protobuf_arrow import message_dict

            datum = message_dict(datum)  # enum names, RFC 3339 times, as people read them
        if raw is None:
            value = "null (a tombstone)"
        elif datum is not None and self.datums.errors[i] is None:
            value = _show(m.value(datum))
        elif m.value_bytes:
            value = MASK
        else:
            value = _show_bytes(raw)
        out: dict[str, Any] = {"where": f"{topic}-{part}@{off}", "value": value}
        if show_key:
            key = self.records.column("key")[i].as_py()
            out["key"] = "null" if key is None else MASK if m.key else _show_bytes(key)
        if self.control[i]:
            out["why"] = "a transaction marker"
        elif why:
            out["why"] = why
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _show(value: Any) -> str:
    text = json.dumps(value, default=_plain, ensure_ascii=False, sort_keys=False)
    return text if len(text) <= 100 else text[:97] + "..."


def _show_bytes(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
        if text.isprintable():
            return json.dumps(text if len(text) <= 100 else text[:97] + "...",
                              ensure_ascii=False)
    except UnicodeDecodeError:
        pass
    shown = raw[:24].hex(" ")
    return f"bytes {shown}{' ...' if len(raw) > 24 else ''} ({len(raw)} bytes)"


def compare(view: SampleView, rule_id: str, refused: np.ndarray, judged: np.ndarray, *,
            excluded: dict[str, int] | None = None, errors: dict[str, int] | None = None
            ) -> RuleCheck:
    """The :class:`RuleCheck` of one rule: ``refused`` (the target's verdicts) against the
    replay's failures of ``rule_id``, both over the ``judged`` records."""
    judged = judged & ~view.control
    expected = view.replay_failed(rule_id) & judged
    refused = refused & judged
    only_t = np.flatnonzero(refused & ~expected).tolist()
    only_r = np.flatnonzero(expected & ~refused).tolist()
    rule = view.rule(rule_id)
    keyish = rule_id == DECODE_KEY or rule.kind in ("key_required", "key_size") or \
        (rule.spec.param("target") is not None and rule.param("target") == "key")
    check = RuleCheck(rule=rule_id, judged=int(judged.sum()), refused=int(refused.sum()),
                      expected=int(expected.sum()),
                      only_target=[view.coords[i] for i in only_t],
                      only_replay=[view.coords[i] for i in only_r],
                      excluded=dict(excluded or {}), errors=dict(errors or {}))
    if only_t:
        check.examples["target"] = view.example(only_t[0], show_key=keyish)
    if only_r:
        check.examples["replay"] = view.example(only_r[0], show_key=keyish)
    return check


def count_reasons(masks: dict[str, np.ndarray]) -> dict[str, int]:
    """``{reason: records}`` for the non-empty masks (the ``excluded`` of a check)."""
    return {k: int(v.sum()) for k, v in masks.items() if v.any()}


def compare_whole(rt: RoundTrip, view: SampleView, refused: np.ndarray, expected: np.ndarray,
                  judged: np.ndarray) -> None:
    """Fill ``rt``'s whole-export comparison: ``refused`` (the export as deployed) against
    ``expected`` (the replay's failures of the rules it enforces), over ``judged``."""
    refused, expected = refused & judged, expected & judged
    rt.judged = int(judged.sum())
    rt.refused, rt.expected = int(refused.sum()), int(expected.sum())
    rt.agree = int((refused & expected).sum())
    rt.only_target = [view.coords[i] for i in np.flatnonzero(refused & ~expected).tolist()]
    rt.only_replay = [view.coords[i] for i in np.flatnonzero(expected & ~refused).tolist()]


def replayer_of(sample: object, now: int | None) -> Replayer:
    """``sample`` as a :class:`~kqlab.validate.replayer.Replayer`: one given is used as is
    (with its cached decodes and rule results); anything else :func:`kqlab.replay` takes is
    loaded into a new one."""
    from kqlab.validate.replayer import Replayer

    return sample if isinstance(sample, Replayer) else Replayer(sample, now=now)
