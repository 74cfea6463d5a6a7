"""Sample checks in the exports (issue 21): ODCS states every check as a quality rule —
library metrics (rowCount, nullValues, duplicateValues) for whole-sample checks the standard
expresses, custom rules (engine kqlab) for the rest — and imports them back identically;
the fidelity report lists each check per target, ``not enforced`` where the target has no
place for it, and never counts that as a problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kqlab.export import export
from kqlab.export.fidelity import fidelity_report
from kqlab.export.odcs import OdcsError, import_odcs
from kqlab.policy import load_policy, loads_policy
from kqlab.policy.check_catalog import CHECK_KINDS
from tests.export.conftest import TODAY
from tests.export.test_odcs import assert_round_trip, datacontract, lint  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CHECKS_FILE = ROOT / "tests" / "policy" / "corpus" / "good" / "checks.yaml"

WHOLE = """kqlab: 1
name: whole-checks
value: {format: json}
rules: [{id: status-set, kind: field_in, field: status, values: [NEW, PAID]}]
checks:
  - {id: rows, kind: volume, min: 100, max: 100000}
  - {id: few-rows, kind: volume, max: 5}
  - {id: customer-null, kind: null_rate, field: customer.id, max: 0.07}
  - {id: order-dups, kind: duplicate_rate, of: order_id, max: 0}
  - {id: windowed, kind: null_rate, field: customer.id, window: 1h, max: 0.07}
  - {id: key-dups, kind: duplicate_rate, of: key, max: 0}
  - {id: few-dups, kind: duplicate_rate, of: order_id, max: 0.01}
  - {id: gate, kind: reject_rate, rule: status-set, max: 0.05}
"""


def _quality(contract: dict) -> dict[str, dict]:
    """Every quality rule of the contract by name (object level and nested properties)."""
    out: dict[str, dict] = {}

    def walk(node: dict) -> None:
        for q in node.get("quality") or ():
            out[q["name"]] = q
        for p in node.get("properties") or ():
            walk(p)
    for obj in contract["schema"]:
        walk(obj)
    return out


def test_every_check_kind_round_trips_through_odcs():
    policy = load_policy(CHECKS_FILE)
    assert {c.kind for c in policy.checks} == set(CHECK_KINDS)
    assert_round_trip(policy)
    ex = export(policy, "odcs", today=TODAY)
    assert [(c.check, c.status) for c in ex.checks] == [(c.id, "stated") for c in policy.checks]
    q = _quality(ex.data["contract"])
    for c in policy.checks:                       # windowed / grouped / other kinds: custom
        assert q[c.id]["type"] == "custom" and q[c.id]["engine"] == "kqlab"


def test_whole_sample_checks_are_the_standards_library_metrics():
    policy = loads_policy(WHOLE)
    assert_round_trip(policy)
    ex = export(policy, "odcs", today=TODAY)
    q = _quality(ex.data["contract"])
    assert (q["rows"]["metric"], q["rows"]["unit"], q["rows"]["mustBeBetween"]) == \
        ("rowCount", "rows", [100, 100000])
    assert q["few-rows"]["mustBeLessOrEqualTo"] == 5
    assert (q["customer-null"]["metric"], q["customer-null"]["unit"],
            q["customer-null"]["mustBeLessOrEqualTo"]) == ("nullValues", "percent", 7.0)
    assert (q["order-dups"]["metric"], q["order-dups"]["unit"], q["order-dups"]["mustBe"]) == \
        ("duplicateValues", "rows", 0)
    for cid in ("windowed", "key-dups", "few-dups", "gate"):
        assert q[cid]["type"] == "custom"
    # the field metrics sit on the field's property, as ODCS tools read them; custom rules
    # on the schema object
    obj = ex.data["contract"]["schema"][0]
    props = {p["name"]: p for p in obj["properties"]}
    assert [x["name"] for x in props["customer"]["properties"][0]["quality"]] == \
        ["customer-null"]
    assert {"rows", "windowed", "key-dups", "gate"} <= {x["name"] for x in obj["quality"]}
    how = {c.check: c.how for c in ex.checks}
    assert "library metric nullValues" in how["customer-null"]
    assert "custom quality rule" in how["gate"]


def test_a_hand_edited_check_is_refused_with_where():
    text = export(loads_policy(WHOLE), "odcs", today=TODAY).files["odcs/whole-checks.odcs.yaml"]
    broken = text.replace("position: 2\n", "position: two\n", 1)
    with pytest.raises(OdcsError, match=r"customer-null.*kqlabCheck must be a mapping with "
                       r"kind and position"):
        import_odcs(broken)


def test_contract_with_checks_passes_datacontract_lint(datacontract, tmp_path):  # noqa: F811
    for policy in (loads_policy(WHOLE), load_policy(CHECKS_FILE)):
        path = tmp_path / f"{policy.name}.odcs.yaml"
        (text,) = export(policy, "odcs", today=TODAY).files.values()
        path.write_text(text, encoding="utf-8")
        doc = lint(datacontract, path, tmp_path)
        assert doc["returncode"] == 0 and doc["result"] == "passed", doc["checks"]


def test_fidelity_report_lists_checks_not_enforced_where_targets_cannot_express_them():
    from dataclasses import replace

    from kqlab.policy.model import Topics

    policy = load_policy(CHECKS_FILE)
    policy = replace(policy, topics=Topics(names=("orders",)))
    report = fidelity_report(policy, subject="orders-value")
    rows = {r["check"]: r for r in report.check_table()}
    assert list(rows) == [c.id for c in policy.checks]
    assert len(report.exports) > 2
    # the Structured Streaming enforcer computes the windowed checks and freshness
    # (tests/spark/test_enforcer_checks.py proves them against the replay)
    streamed = {"volume", "fresh", "currency-set", "dup-orders"}
    for row in rows.values():
        for target, cell in row["targets"].items():
            expected = "stated" if target == "odcs" else \
                "enforced" if target == "spark-streaming" and row["check"] in streamed else \
                "not enforced"
            assert cell["status"] == expected, (row["check"], target)
    assert "whole sample" in rows["dup-keys"]["targets"]["spark-streaming"]["how"]
    assert "baseline" in rows["amount-drift"]["targets"]["spark-streaming"]["how"]
    assert "aggregate over windows" in rows["volume"]["targets"]["gate"]["how"]
    assert not any("volume" in p for p in report.problems())
    doc = json.loads(json.dumps(report.to_dict(), default=str))
    assert [r["check"] for r in doc["checks"]] == [c.id for c in policy.checks]
    assert doc["targets"]["odcs"]["checks"][0]["status"] == "stated"
    page = report.to_html()
    assert "<h2>Sample checks</h2>" in page and "not enforced" in page
    # enforced is a claim: the export started no Spark, as for the rules (unverified there)
    for cid in streamed:
        cell = rows[cid]["targets"]["spark-streaming"]
        assert cell["how"].startswith("the enforcer computes it"), cid
        assert cell["why"].startswith(f"claimed enforced ({cell['how']}); not run by this "
                                      "export: spark-streaming cannot run here"), cid
        assert "test suite" in cell["why"]
        assert cell["why"] in page.replace("&#x27;", "'")
    rule = report.verdict(policy.rules[0].id, "spark-streaming")
    assert rule.verdict == "unverified" and "spark-streaming cannot run here" in rule.why
    assert rows["volume"]["targets"]["odcs"]["why"] == rows["volume"]["targets"]["odcs"]["how"]
    # by partition: every partition is known, a silent one alerted; by a header: say not
    assert "silent from the start is alerted" in rows["volume"]["targets"]["spark-streaming"][
        "how"]
    by_header = replace(policy, checks=(replace(policy.check("volume"), by="header:region"),))
    (row,) = fidelity_report(by_header, subject="orders-value").check_table()
    how = row["targets"]["spark-streaming"]["how"]
    assert "cannot be known before a record names them" in how and "header:region" in how


FOREIGN_METRICS = """\
apiVersion: v3.1.0
kind: DataContract
id: shop-clicks
name: clicks
version: 1.0.0
schema:
- name: clicks
  physicalType: topic
  quality:
  - {type: library, metric: rowCount, mustBeBetween: [10, 500]}
  - {type: library, metric: rowCount, mustBeLessThan: 1000, name: not-flooded}
  - {type: library, metric: rowCount, mustNotBe: 0}
  properties:
  - name: session
    quality:
    - {type: library, metric: duplicateValues, mustBe: 0}
    - {type: library, metric: missingValues, mustBeLessOrEqualTo: 2.5, unit: percent}
    - {type: library, metric: nullValues, mustBeLessOrEqualTo: 3, unit: rows}
"""


def test_a_foreign_contracts_data_set_metrics_are_sample_checks():
    result = import_odcs(FOREIGN_METRICS)
    got = {c.id: (c.kind, dict(c.params)) for c in result.policy.checks}
    assert got == {"volume": ("volume", {"min": 10, "max": 500}),
                   "not-flooded": ("volume", {"max": 999}),
                   "session-duplicate_rate": ("duplicate_rate", {"of": "session", "max": 0}),
                   "session-null_rate": ("null_rate", {"field": "session", "max": 0.025})}
    # what kqlab cannot state is listed, never dropped: a count that must not be 0, and a
    # null count with a tolerance in rows (a share needs the total)
    skipped = "\n".join(result.skipped)
    assert "rowCount" in skipped and "nullValues with a tolerance" in skipped
    assert len(result.skipped) == 2
