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
