"""Verdicts carry their identity as data: which check or rule failed, its kind, spec step,
code and parameters travel beside the message from the check to the verdict tables, so no
view has to read a message to know what it means (ARCHITECTURE.md, "identity is data")."""

from __future__ import annotations

import pyarrow as pa

from kqlab.kafka.builder import BatchBuilder, Record
from kqlab.kafka.checks import CHECKS
from kqlab.policy.model import BrokerSettings, Policy, Rule
from kqlab.validate import replay

NOW = 1_700_000_000_000
R3_TEXT = "Compacted topic cannot accept message without key in topic partition orders-0"


def _segment(tmp_path, *batches: list[Record]):
    folder = tmp_path / "orders-0"
    folder.mkdir()
    data, offset = [], 0
    for records in batches:
        b = BatchBuilder(base_offset=offset, base_timestamp=NOW)
        for r in records:
            b.append(r)
        data.append(b.build())
        offset += len(records)
    (folder / "00000000000000000000.log").write_bytes(b"".join(data))
    return folder


def _policy(*rules: Rule, **configs: str) -> Policy:
    return Policy(name="t", broker=BrokerSettings(version="4.0", configs=configs), rules=rules)


def _failures(v) -> list[list[dict]]:
    return v.records.column("failures").to_pylist()


def test_a_rule_whose_message_reads_like_a_broker_check_stays_the_rule(tmp_path):
    # the rule's message is, character for character, the broker's R3 text: the verdicts
    # must still say the rule failed (and the broker's R3 failure must stay R3)
    log = _segment(tmp_path,
                   [Record(key=None, value=b"a")],          # R3: no key on a compacted topic
                   [Record(key=b"k", value=b"x" * 40)])     # fails the size rule
    big = Rule(id="small-values", kind="value_size", params={"max": 10}, message=R3_TEXT)
    v = replay(log, _policy(big, **{"cleanup.policy": "compact"}), now=NOW)
    f = _failures(v)
    assert [(x["rule"], x["kind"], x["step"], x["code"]) for x in f[0]] == [
        ("broker:R3", "broker", "R3", 87)]
    assert f[0][0]["params"] == [("tp", "orders-0")]
    assert [(x["rule"], x["kind"], x["step"], x["code"]) for x in f[1]] == [
        ("small-values", "value_size", None, 87)]
    assert f[0][0]["message"] == f[1][0]["message"] == R3_TEXT
    # the batch verdicts name the check of each record error beside its wire form
    errs = v.batches.column("record_errors").to_pylist()
    assert [(e["check"], e["rule"]) for e in errs[0]] == [("R3", None)]
    assert [(e["check"], e["rule"]) for e in errs[1]] == [("P", "small-values")]


def test_timestamp_failures_carry_the_values_their_message_is_rendered_from(tmp_path):
    old = NOW - 10_000
    log = _segment(tmp_path, [Record(key=b"k", value=b"v", timestamp=old)])
    v = replay(log, _policy(**{"message.timestamp.before.max.ms": "1000"}), now=NOW)
    (failure,) = _failures(v)[0]
    params = dict(failure["params"])
    assert (failure["rule"], failure["step"], failure["code"]) == ("broker:R4", "R4", 32)
    assert params == {"timestamp": str(old), "offset": "0", "lower": str(NOW - 1000),
                      "upper": str(NOW + 3_600_000)}
    # the message is the check's template over exactly those values
    assert failure["message"] == CHECKS["R4"].render(**params)


def test_batch_level_checks_carry_their_parameters(tmp_path):
    log = _segment(tmp_path, [Record(key=b"k", value=b"v" * 100)])
    v = replay(log, _policy(**{"max.message.bytes": "100"}), now=NOW)
    batch = v.batches.to_pylist()[0]
    assert (batch["check"], batch["error_code"]) == ("C2", 10)
    params = dict(batch["params"])
    assert params["max_message_bytes"] == "100" and int(params["size"]) > 100
    assert batch["detail"] == CHECKS["C2"].render(**params)
    (failure,) = _failures(v)[0]
    assert (failure["rule"], failure["step"], dict(failure["params"])) == \
        ("broker:C2", "C2", params)


def test_every_check_renders_its_template_from_its_parameters():
    # each check's text is a function of its parameters alone, in both forms
    for check in CHECKS:
        values = {name: f"<{name}>" for name in check.params}
        one = check.render(**values)
        many = check.render_array({k: pa.array([v, v]) for k, v in values.items()})
        assert many.to_pylist() == [one, one] if values else many.to_pylist() == [one]
        for v in values.values():
            assert v in one
