"""Sensitive fields: the policy section, and no masked value reaching a figure, a record detail
or a report unless the session (or the call) unmasks."""

from __future__ import annotations

import orjson
import pytest

import kqlab
import kqlab.viz as viz
from kqlab.policy import PolicyError, diff, dump_policy, loads_policy
from kqlab.reporting import report, top_failures
from kqlab.validate.replayer import Replayer

from .conftest import SECRET_EMAIL, SECRET_KEY, SECRET_TOKEN

SECRETS = (SECRET_EMAIL, SECRET_KEY, SECRET_TOKEN, "ada.lovelace", "s3cr3t")
BASE = "kqlab: 1\nname: p\nvalue: {format: json}\n"


def test_section_round_trips_and_stays_out_of_the_hash():
    p = loads_policy(BASE + "sensitive: {fields: [customer.email], key: true, "
                     "headers: [authorization]}\n")
    assert p.sensitive.fields == ("customer.email",) and p.sensitive.key
    assert loads_policy(dump_policy(p)) == p
    plain = loads_policy(BASE)
    assert p.content_hash() == plain.content_hash()  # masking changes no verdict
    d = diff(plain, p)
    assert not d and "changed masking sensitive.fields: [] -> ['customer.email']" in d.summary()


@pytest.mark.parametrize(("text", "key", "needle"), [
    ("sensitive: {fields: [customer..email]}", "sensitive.fields[0]", "empty path segment"),
    ("sensitive: {fields: [a, a]}", "sensitive.fields[1]", "listed twice"),
    ("sensitive: {field: [a]}", "sensitive.field", "did you mean 'fields'"),
    ("sensitive: {}", "sensitive", "nothing is masked"),
    ("sensitive: {key: 'yes'}", "sensitive.key", "expected true or false"),
    ("sensitive: {headers: ['']}", "sensitive.headers[0]", "masks nothing"),
    ("sensitive: {fields: [a], value: true}", "sensitive.fields", "already masks"),
])
def test_malformed_sections_are_reported_precisely(text, key, needle):
    with pytest.raises(PolicyError) as info:
        loads_policy(BASE + text + "\n", "p.yaml")
    assert info.value.key == key and info.value.line == 4 and needle in str(info.value)


def test_fields_need_a_decoded_value():
    with pytest.raises(PolicyError, match="value: true"):
        loads_policy("kqlab: 1\nname: p\nvalue: {format: string}\nsensitive: {fields: [a]}\n")
    assert loads_policy("kqlab: 1\nname: p\nsensitive: {value: true}\n").sensitive.value


def _replay(sensitive_sample):
    table, policy = sensitive_sample
    r = Replayer(table, framing="single", now=1_763_700_000_000)
    return r, r.run(policy), policy


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_secret_reaches_a_figure(sensitive_sample):
    r, v, policy = _replay(sensitive_sample)
    assert v.by_outcome()["rejected"] > 0
    figures = [viz.rejections_by_reason(v), viz.rejections_by_offset(v),
               viz.rejection_timeline(v), viz.by_producer(v, r), viz.by_schema_id(v, r),
               viz.by_key_pattern(v, r, policy=policy)]
    for fig in figures:
        assert _leaks(fig.to_json()) == []
    # the honest counterpart: unmasked, the key pattern keeps the key's letters
    shown = viz.by_key_pattern(v, r, policy=policy, unmask=True).to_json()
    assert "cust-ada-9999" in shown


def test_no_secret_reaches_a_record_detail(sensitive_sample):
    r, v, policy = _replay(sensitive_sample)
    d = viz.record_detail(v, r, partition=0, offset=0, policy=policy)  # record 0: secret
    text = orjson.dumps(d.to_dict()).decode() + d.to_html()
    assert d.masked and _leaks(text) == []
    assert d.value["customer"]["email"] == viz.MASK and d.value["amount"] == -5
    assert [f["rule"] for f in d.failures][:2] == ["email-domain", "auth-known"]
    assert d.failures[0]["message"].startswith("customer.email=•••")
    # the broker's record_errors quote the policy message: scrubbed too
    assert d.producer_saw["record_errors"] and _leaks(str(d.producer_saw)) == []
    shown = viz.record_detail(v, r, partition=0, offset=0, policy=policy, unmask=True)
    assert SECRET_EMAIL in orjson.dumps(shown.to_dict()).decode()
    assert shown.key == SECRET_KEY and not shown.masked


def test_unmasking_is_a_per_session_choice(sensitive_sample):
    r, v, policy = _replay(sensitive_sample)
    assert not viz.is_unmasked()
    with viz.unmasked():
        assert viz.record_detail(v, r, partition=0, offset=0, policy=policy).key == SECRET_KEY
        # an explicit unmask=False masks even in an unmasked session
        assert viz.record_detail(v, r, partition=0, offset=0, policy=policy,
                                 unmask=False).key == viz.MASK
    assert viz.record_detail(v, r, partition=0, offset=0, policy=policy).key == viz.MASK
    kqlab.unmask()
    try:
        assert viz.record_detail(v, r, partition=0, offset=0, policy=policy).key == SECRET_KEY
    finally:
        kqlab.unmask(False)


def test_no_secret_reaches_a_report(sensitive_sample, tmp_path):
    r, v, policy = _replay(sensitive_sample)
    failures = top_failures(v, policy).to_pydict()
    assert "customer.email=••• does not match '@example\\\\.com$'" in failures["message"] or \
        any(m.startswith("customer.email=•••") for m in failures["message"])
    path = report(v, policy, sample=r, path=tmp_path / "r.html")
    assert _leaks(path.read_text(encoding="utf-8")) == []
    shown = report(v, policy, sample=r, unmask=True)
    assert SECRET_EMAIL in shown  # the top failures quote it once unmasked


def test_examples_in_the_reported_policy_are_masked(sensitive_sample):
    r, _, _ = _replay(sensitive_sample)
    policy = loads_policy(BASE + "sensitive: {fields: [customer.email], key: true}\nrules:\n"
                          "- id: e\n  kind: field_not_null\n  field: customer.email\n"
                          f"  examples: {{fail: [{{key: {SECRET_KEY}, value: {{customer: "
                          f"{{email: null}}}}}}], pass: [{{value: {{customer: {{email: "
                          f"'{SECRET_EMAIL}'}}}}}}]}}\n")
    text = report(r.run(policy), policy, sample=r)
    assert _leaks(text) == [] and "email: •••" in text


def test_sample_check_labels_and_new_values_of_sensitive_data_are_masked():
    """Group labels of a check grouped by a masked header or a sensitive field, and a drift
    check's new values of a sensitive field, are data: masked in the rows views read (their
    text rendered again); partitions, other fields and schema shapes are not."""
    from kqlab.viz._masking import MASK, Masker, masker

    policy = loads_policy(BASE + """sensitive: {fields: [customer], headers: [tenant]}
checks:
  - {id: by-tenant, kind: volume, window: 1m, by: "header:tenant", min: 1}
  - {id: by-customer, kind: volume, window: 1m, by: customer, min: 1}
  - {id: by-region, kind: volume, window: 1m, by: region, min: 1}
  - {id: by-partition, kind: volume, window: 1m, by: partition, min: 1}
  - {id: customers, kind: drift, field: customer, baseline: base/, max_psi: 0.2}
  - {id: regions, kind: drift, field: region, baseline: base/, max_psi: 0.2}
""")
    m = masker(policy, unmask=False)

    def row(check, group, new=()):
        return {"check": check, "kind": policy.check(check).kind, "status": "fail",
                "reason": None, "metric": "records", "observed": 0.0, "min": 1.0, "max": None,
                "window_ms": 60000, "by": policy.check(check).by, "records": 5, "windows": 2,
                "failing_windows": 1, "new_values": list(new), "params": {},
                "failing": [{"group": group, "start": 0, "end": 60000, "records": 0,
                             "observed": 0.0}], "text": "stale"}

    rows = [row("by-tenant", "acme-corp"), row("by-customer", "ada.lovelace"),
            row("by-region", "eu-west"), row("by-partition", "orders-0"),
            row("customers", None, ["ada.lovelace", "grace.hopper"]),
            row("regions", None, ["eu-north"])]
    shown = {r["check"]: r for r in m.check_rows(rows)}
    assert shown["by-tenant"]["failing"][0]["group"] == Masker.group_label("acme-corp")
    assert shown["by-customer"]["failing"][0]["group"].startswith(MASK)
    assert "ada.lovelace" not in shown["by-customer"]["text"]
    assert MASK in shown["by-customer"]["text"]                       # rendered again
    assert shown["by-region"]["failing"][0]["group"] == "eu-west"
    assert shown["by-partition"]["failing"][0]["group"] == "orders-0"
    assert shown["customers"]["new_values"] == [MASK, MASK]
    assert "grace" not in shown["customers"]["text"]
    assert shown["regions"]["new_values"] == ["eu-north"]
    assert rows[1]["failing"][0]["group"] == "ada.lovelace"          # copies, input kept
    assert masker(policy, unmask=True).check_rows(rows) == rows       # unmasked: as they are
    import pyarrow as pa

    from kqlab.validate.sample_checks.results import CHECK_WINDOWS_SCHEMA

    windows = pa.Table.from_pylist(
        [{"check": "by-customer", "group": g, "start": s, "end": s + 60000, "records": 1,
          "observed": 1.0, "status": "pass", "partial": False}
         for g, s in (("ada", 0), ("bob", 0), ("ada", 60000), (None, 0))],
        schema=CHECK_WINDOWS_SCHEMA)
    masked = m.check_windows("by-customer", windows).column("group").to_pylist()
    assert masked[0] == masked[2] != masked[1] and masked[3] is None
    assert all(g.startswith(MASK) for g in masked[:3])
    assert m.check_windows("by-region", windows) is windows


def test_no_sensitive_group_label_reaches_a_report(tmp_path):
    """The report's verdict and its sample-checks section quote a failing window's group:
    masked when it is a sensitive field's value."""
    from tests.validate.test_sample_checks import HEAD, hour, write_log

    log = write_log(tmp_path / "log", {0: hour(0, value=lambda p, i: {
        "amount": float(i), "customer": f"cust-{i % 3}"})})
    text = HEAD + """sensitive: {fields: [customer]}
checks:
  - {id: per-customer, kind: volume, window: 10m, by: customer, min: 1000}
"""
    policy = loads_policy(text)
    verdicts = kqlab.replay(log, policy)
    assert "cust-0" in str(verdicts.checks().column("failing").to_pylist())
    page = report(verdicts, policy)
    assert "per-customer" in page and "cust-" not in page
    assert "cust-" in report(verdicts, policy, unmask=True)
