"""Field rules and CEL on Protobuf values are checked against the descriptors at load."""

from __future__ import annotations

import pytest

from kqlab.policy import PolicyError, loads_policy
from tests.serde.protobuf_helpers import write_protos


def _policy(root, rule: str):
    return loads_policy(f"kqlab: 1\nname: pb\ntopics: {{names: [o]}}\nkey: {{format: none}}\n"
                        f"value: {{format: protobuf, schemas: {{path: {root}, message: "
                        f"kqt.Order}}}}\nrules:\n- {rule}\n", "pb")


def test_a_field_the_message_lacks_is_refused_with_the_nearest_name(tmp_path):
    root = write_protos(tmp_path)
    assert _policy(root, "{id: q, kind: field_range, field: qty, min: 1}").rules
    assert _policy(root, "{id: c, kind: field_length, field: total.currency, min: 3}").rules
    with pytest.raises(PolicyError, match="did you mean 'qty'"):
        _policy(root, "{id: q, kind: field_range, field: qtty, min: 1}")
    with pytest.raises(PolicyError, match="did you mean 'currency'"):
        _policy(root, "{id: c, kind: field_length, field: total.curency, min: 3}")
    with pytest.raises(PolicyError, match="did you mean 'status'"):
        _policy(root, "{id: s, kind: cel, expr: 'value.statuss == \"SHIPPED\"'}")
