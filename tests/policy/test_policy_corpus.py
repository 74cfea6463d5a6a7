"""The corpus: every malformed file raises PolicyError with its message, file, line and key
(and column, for an error inside an expression, a pattern or a field path); every good file
loads, round-trips and validates against the shipped JSON Schema.

Malformed files that check rules against declared schemas name ``schemas/...`` folders of the
corpus (relative to the working directory, as a replay reads them) or the ``mock://`` registry
subject the ``in_corpus`` fixture fills with the same Avro schemas."""

from __future__ import annotations

from pathlib import Path

import pytest

from kqlab.policy import KINDS, PolicyError, dump_policy, load_policy, loads_policy

CORPUS = Path(__file__).parent / "corpus"
GOOD = sorted((CORPUS / "good").glob("*.yaml"))
BAD = sorted((CORPUS / "bad").glob("*.yaml"))
#: the registry the ``*-registry-*`` corpus files name, and the subject they read
REGISTRY, SUBJECT = "mock://kqlab-corpus", "orders-value"


@pytest.fixture
def in_corpus(monkeypatch):
    """Run from the corpus folder, with its order schemas (two versions) in the registry."""
    from confluent_kafka.schema_registry import Schema

    from kqlab.serde.schemas import registry_client

    monkeypatch.chdir(CORPUS)
    client = registry_client(REGISTRY)
    for version in ("1", "2"):
        text = (CORPUS / "schemas" / "orders" / f"{version}.avsc").read_text(encoding="utf-8")
        client.register_schema(SUBJECT, Schema(text, "AVRO"))


def expectations(path: Path) -> dict[str, str]:
    """The ``# expect:``, ``# line:``, ``# column:`` and ``# key:`` header comments of a corpus
    file (``column``: the error is inside a value — an expression, a pattern, a field path —
    and the message shows ``file:line:column:``)."""
    meta: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("# "):
            break
        name, sep, value = line[2:].partition(": ")
        if sep and name in ("expect", "line", "column", "key"):
            meta[name] = value
    return meta


def test_corpus_is_big_enough():
    assert len(BAD) >= 55
    assert all("expect" in expectations(path) for path in BAD)


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_malformed_policy_is_reported_precisely(path, in_corpus):
    meta = expectations(path)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    err = info.value
    message = str(err)
    assert meta["expect"] in message
    assert path.name in message
    assert err.file == str(path)
    if "line" in meta:
        assert err.line == int(meta["line"]), message
        where = f"{path}:{meta['line']}" + (f":{meta['column']}" if "column" in meta else "")
        assert message.startswith(f"{where}: "), message
    if "column" in meta:
        assert err.inside and err.column == int(meta["column"]), message
    else:
        assert not err.inside, message
    if "key" in meta:
        assert err.key == meta["key"], message
        assert f": {meta['key']}: " in message


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_malformed_text_fails_the_same_way_from_a_string(path, in_corpus):
    with pytest.raises(PolicyError) as info:
        loads_policy(path.read_text(encoding="utf-8"), source="inline.yaml")
    assert expectations(path)["expect"] in str(info.value)
    assert str(info.value).startswith("inline.yaml")


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_every_error_is_one_short_paragraph(path, in_corpus):
    """However long the expression or pattern, the message quotes a short excerpt of it."""
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert len(message) < 600 + len(str(path)), message


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_policy_round_trips(path):
    policy = load_policy(path)
    text = dump_policy(policy)
    again = loads_policy(text)
    assert again == policy
    assert dump_policy(again) == text
    assert again.content_hash() == policy.content_hash()


def test_good_corpus_uses_every_rule_kind():
    used = {rule.kind for path in GOOD for rule in load_policy(path).rules}
    assert used == set(KINDS)


def test_good_corpus_uses_every_check_kind(in_corpus):
    from kqlab.policy.check_catalog import CHECK_KINDS

    used = {check.kind for path in GOOD for check in load_policy(path).checks}
    assert used == set(CHECK_KINDS)
