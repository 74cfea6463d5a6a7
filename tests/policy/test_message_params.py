"""Issue 30, item 2: rule messages name parameters (``{min}``, ``{max}``) filled from the
rule's current parameters; a hand-written literal of an edited parameter's old value is
flagged in the editor's form and its warning line, and at load time by every command."""

from __future__ import annotations

from kqlab.cli import main
from kqlab.policy.message_params import params_filled
from kqlab.policy.model import Rule

LITERAL = """kqlab: 1
name: p
value: {format: json}
rules:
- id: amount-range
  kind: field_range
  field: amount
  min: 0.01
  max: 100000
  message: amount must be within [0.01, 100000], got {value}
"""


def test_templates_follow_the_parameters():
    rule = Rule(id="a", kind="field_range", message="within [{min}, {max}], got {value}",
                params={"field": "amount", "min": 10, "max": 100000})
    assert rule.render_message(value=3) == "within [10, 100000], got 3"
    assert params_filled(rule) == "within [10, 100000], got {value}"  # what exports write


def test_kqlab_test_warns_of_a_literal_with_file_line_and_key(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(LITERAL, encoding="utf-8")
    main(["test", str(path), "--json"])
    err = capsys.readouterr().err
    assert f"{path}:10: rules[0].message: rule amount-range" in err
    assert "min's value 0.01" in err and "{min}" in err and "{max}" in err
    path.write_text(LITERAL.replace("[0.01, 100000]", "[{min}, {max}]"), encoding="utf-8")
    main(["test", str(path), "--json"])
    assert "rules[0].message" not in capsys.readouterr().err


def test_the_editor_flags_a_stale_literal_when_min_is_edited():
    import pyarrow as pa

    from kqlab.policy import loads_policy
    from kqlab.records import RECORDS_SCHEMA
    from kqlab.widgets import PolicyEditor

    rows = [{"topic": "t", "partition": 0, "offset": i, "timestamp": 0, "timestamp_type": 0,
             "key": b"k", "batch_offset": i, "batch_index": 0,
             "value": b'{"amount": %d}' % (i + 5), "headers": []} for i in range(20)]
    from kqlab.authoring import AuthoringSession

    editor = PolicyEditor(AuthoringSession(
        loads_policy(LITERAL), pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA),
        framing="single"))
    form = editor.edit("amount-range")
    assert form.message_status.value == ""
    form.fields["min"].value = "10"
    assert "min&#x27;s old value 0.01" in form.message_status.value
    editor.apply_form()
    assert any("old value 0.01" in w for w in editor.session.message_warnings)
    assert "old value 0.01" in editor.warning.value
    editor.update_rule("amount-range", message="within [{min}, {max}], got {value}")
    assert editor.session.message_warnings == ()
    failures = editor.session.verdicts.records.column("failures").to_pylist()
    texts = {f["message"] for fs in failures for f in fs or [] if f["rule"] == "amount-range"}
    assert texts and all(t.startswith("within [10, 100000], got ") for t in texts)
