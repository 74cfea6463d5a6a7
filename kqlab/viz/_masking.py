"""Masking of sensitive data (a policy's ``sensitive`` section) in views, tables and reports.

A policy names what people must not see by accident (:class:`kqlab.policy.model.Sensitive`):
value fields, the key, the whole value, header values.  Everything kqlab shows — figures, the
record detail, the HTML report — passes through here, masked by default with :data:`MASK`.
Seeing the data is an explicit, per-session choice: :func:`unmask` (a ``ContextVar``, so one
notebook kernel or one thread of a server decides for itself) or ``unmask=True`` on one call.

Failure messages are data too: ``amount=-3 is outside [0.01, 100000]`` quotes the value.  The
messages of a rule that reads something sensitive are replaced by the rule's own template with
the data placeholders (``{value}``, ``{error}``) filled with the mask.  Sample checks' results
are data too: a check grouped ``by`` a masked header or a sensitive field labels its windows
with that data, and a drift check on a sensitive field lists its new values; views show such
labels as pseudonyms (:meth:`Masker.group_label`: the same label reads the same everywhere in
one session, and nothing of it survives) and new values as the mask.  This module imports no
plotting library, so exporters can use it.
"""

from __future__ import annotations

import hashlib
import os
import string
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.policy.check_catalog import by_target
from kqlab.policy.model import Check, Policy, Rule, Sensitive

__all__ = ["MASK", "Masker", "is_unmasked", "masker", "unmask", "unmasked"]

#: what a masked value reads as, everywhere
MASK = "•••"
_UNMASKED: ContextVar[bool] = ContextVar("kqlab_unmasked", default=False)
#: the key of the pseudonyms masked group labels read as: drawn once per process, so a label
#: reads the same in every view of a session and cannot be recovered by hashing guesses
_PSEUDONYM_KEY = os.urandom(16)

#: rule kinds whose message quotes the field's value
_FIELD_KINDS = ("field_not_null", "field_range", "field_in", "field_regex", "field_length",
                "field_type")
#: rule kinds whose ``{error}`` may quote any part of the value (a JSON Schema error does)
_VALUE_ERROR_KINDS = ("json_schema",)
_HEADER_KINDS = ("header_values", "header_pattern")
#: template placeholders that carry record data (everything else comes from the rule itself)
_DATA_PLACEHOLDERS = ("value", "error")


def unmask(session: bool = True) -> None:
    """Show sensitive data in every view of this session (``unmask(False)`` masks again).

    The choice is per session (a context variable), never persisted, and never the default.

    Examples
    --------
    >>> unmask(); is_unmasked()
    True
    >>> unmask(False); is_unmasked()
    False
    """
    _UNMASKED.set(bool(session))


def is_unmasked() -> bool:
    """Whether this session chose to see sensitive data (:func:`unmask`)."""
    return _UNMASKED.get()


@contextmanager
def unmasked(show: bool = True) -> Iterator[None]:
    """Within the block, sensitive data is shown (``show=True``) or masked."""
    token = _UNMASKED.set(show)
    try:
        yield
    finally:
        _UNMASKED.reset(token)


class _Fill(dict):
    """Format fill: a rule's parameters, the mask for data placeholders and unknown names."""

    def __missing__(self, name: str) -> str:
        return MASK


@dataclass(frozen=True)
class Masker:
    """What to mask for one policy; ``active`` False means show everything.

    Build it with :func:`masker`.  Every method returns its input unchanged when inactive.
    """

    sensitive: Sensitive
    rules: Mapping[str, Rule]
    active: bool
    #: the policy's sample checks by id (what :meth:`check_rows` needs to know of them)
    checks: Mapping[str, Check] = field(default_factory=dict)

    # -- which rules quote sensitive data -------------------------------------------------------
    @property
    def sensitive_rules(self) -> frozenset[str]:
        """Ids of rules whose failure messages may quote sensitive data."""
        if not self.active:
            return frozenset()
        return frozenset(rid for rid, rule in self.rules.items() if self._quotes(rule))

    def _quotes(self, rule: Rule) -> bool:
        s = self.sensitive
        target_key = rule.param("target") == "key" if rule.spec.param("target") else False
        if rule.kind == "plugin":  # a plugin's message can say anything
            return True
        if rule.kind in _FIELD_KINDS:
            return (s.key if target_key else s.covers_field(str(rule.param("field"))))
        if rule.kind in _VALUE_ERROR_KINDS:
            return s.key if target_key else bool(s.fields or s.value)
        if rule.kind in _HEADER_KINDS:
            return rule.param("name") in s.headers
        # a custom message may quote the value: {value} of key/value rules
        template = rule.message or ""
        return any(f"{{{p}" in template for p in _DATA_PLACEHOLDERS) and bool(s)

    def message(self, rule_id: str | None, message: str | None) -> str | None:
        """``message`` of ``rule_id``, or the rule's template with its data masked."""
        if not self.active or message is None or rule_id not in self.sensitive_rules:
            return message
        return masked_template(self.rules[rule_id])

    def templates(self) -> dict[str, str]:
        """Rule id -> the message shown instead of its failures' own, for every rule whose
        messages may quote sensitive data (empty when inactive): what an engine replaces
        before grouping failure messages (:meth:`VerdictsView.top_failures`)."""
        return {r: masked_template(self.rules[r]) for r in sorted(self.sensitive_rules)}

    def messages(self, rules: pa.Array, messages: pa.Array) -> pa.Array:
        """The ``message`` column of flattened failures, masked per rule (vectorised)."""
        hidden = sorted(self.sensitive_rules)
        if not hidden or len(messages) == 0:
            return messages
        idx = pc.index_in(rules, value_set=pa.array(hidden, pa.string()))
        templates = pa.array([masked_template(self.rules[r]) for r in hidden], pa.string())
        replaced = pc.take(templates, idx)
        return pc.if_else(pc.is_null(idx), messages, replaced)

    # -- record content -------------------------------------------------------------------------
    @property
    def key(self) -> bool:
        """Whether keys are masked."""
        return self.active and self.sensitive.key

    @property
    def whole_value(self) -> bool:
        """Whether values are masked entirely (raw bytes always are when fields are sensitive:
        the bytes hold the fields)."""
        return self.active and self.sensitive.value

    @property
    def value_bytes(self) -> bool:
        """Whether a value's raw bytes must be hidden (they contain any sensitive field)."""
        return self.active and (self.sensitive.value or bool(self.sensitive.fields))

    def header(self, name: str) -> bool:
        """Whether the value of header ``name`` is masked."""
        return self.active and name in self.sensitive.headers

    def value(self, decoded: Any) -> Any:
        """A decoded value with every sensitive field replaced by :data:`MASK` (a copy).

        Examples
        --------
        >>> m = masker(Sensitive(fields=("customer.email",)), unmask=False)
        >>> m.value({"customer": {"email": "a@b.c", "id": 7}, "amount": 3})
        {'customer': {'email': '•••', 'id': 7}, 'amount': 3}
        """
        if not self.active:
            return decoded
        if self.sensitive.value:
            return None if decoded is None else MASK
        for path in self.sensitive.fields:
            decoded = _mask_path(decoded, path.split("."))
        return decoded


    # -- sample-check results -------------------------------------------------------------------
    def check_groups(self, check: Check | None) -> bool:
        """Whether ``check``'s group labels are sensitive data: it groups ``by`` a masked
        header's values or a sensitive field's (a partition never is)."""
        if not self.active or check is None or check.by is None:
            return False
        what, name = by_target(check.by)
        if what == "header":
            return name in self.sensitive.headers
        if what == "field":
            return self.sensitive.covers_field(name)
        return False

    def check_values(self, check: Check | None) -> bool:
        """Whether ``check``'s ``new_values`` are sensitive data: the new categories a drift
        check of a sensitive field found (schema shapes name fields, never their values)."""
        return (self.active and check is not None and check.kind == "drift"
                and self.sensitive.covers_field(str(check.param("field"))))

    @staticmethod
    def group_label(label: str | None) -> str | None:
        """A masked group label: :data:`MASK` and a keyed digest of the label (None stays
        None).  Distinct labels stay distinct (so sparklines and failing windows still tell
        groups apart) without any of their text.

        Examples
        --------
        >>> a, b = Masker.group_label("alice@x.org"), Masker.group_label("bob@x.org")
        >>> a.startswith(MASK), a == Masker.group_label("alice@x.org"), a == b
        (True, True, False)
        """
        if label is None:
            return None
        digest = hashlib.blake2b(label.encode("utf-8", "surrogatepass"), digest_size=3,
                                 key=_PSEUDONYM_KEY).hexdigest()
        return f"{MASK}{digest}"

    def check_rows(self, rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Result rows (dicts of ``CHECK_RESULTS_SCHEMA``, as sessions and summaries list them)
        with sensitive group labels and new values masked, and their ``text`` rendered again
        from what is left (copies; rows of unknown checks and an inactive masker: unchanged
        copies)."""
        from kqlab.validate.sample_checks.results import describe_check

        out = []
        for row in rows:
            row = dict(row)
            check = self.checks.get(row["check"])
            groups, values = self.check_groups(check), self.check_values(check)
            if groups:
                row["failing"] = [{**f, "group": self.group_label(f["group"])}
                                  for f in row.get("failing") or []]
                if (row.get("params") or {}).get("ahead_group") is not None:
                    row["params"] = {**row["params"], "ahead_group": self.group_label(
                        row["params"]["ahead_group"])}
            if values:
                row["new_values"] = [MASK] * len(row.get("new_values") or [])
            if (groups or values) and "text" in row:
                row["text"] = describe_check(row)
            out.append(row)
        return out

    def check_windows(self, check_id: str, windows: pa.Table) -> pa.Table:
        """A check's judged windows (``CHECK_WINDOWS_SCHEMA``) with its group labels masked
        when they are sensitive (:meth:`check_groups`): each distinct label once."""
        if not self.check_groups(self.checks.get(check_id)) or windows.num_rows == 0:
            return windows
        encoded = pc.dictionary_encode(windows.column("group").combine_chunks())
        labels = pa.array([self.group_label(v) for v in encoded.dictionary.to_pylist()],
                          pa.string())
        masked = pc.take(labels, encoded.indices)
        i = windows.schema.get_field_index("group")
        return windows.set_column(i, windows.schema.field(i), masked)


def masked_template(rule: Rule) -> str:
    """The rule's failure message with every data placeholder filled with :data:`MASK`."""
    template = rule.message or rule.spec.message
    fill = _Fill({p.name: rule.param(p.name) for p in rule.spec.params})
    fill["rule"] = rule.id
    for name in _DATA_PLACEHOLDERS:
        fill[name] = MASK
    try:
        return string.Formatter().vformat(template, (), fill)
    except (IndexError, ValueError, AttributeError, TypeError):
        return f"{rule.id}: {MASK}"


def _mask_path(value: Any, parts: list[str]) -> Any:
    """``value`` with the field at ``parts`` masked; lists are masked element-wise."""
    if isinstance(value, list | tuple):
        return [_mask_path(v, parts) for v in value]
    if not isinstance(value, Mapping) or parts[0] not in value:
        return value
    out = dict(value)
    if len(parts) == 1:
        out[parts[0]] = None if out[parts[0]] is None else MASK
    else:
        out[parts[0]] = _mask_path(out[parts[0]], parts[1:])
    return out


def masker(policy: Policy | Sensitive | None, unmask: bool | None = None) -> Masker:
    """What to mask for ``policy``: masked unless ``unmask=True`` or the session unmasked.

    ``unmask=None`` follows the session (:func:`unmask`); ``False`` masks even then.
    """
    checks: dict[str, Check] = {}
    if isinstance(policy, Policy):
        sensitive, rules = policy.sensitive, {r.id: r for r in policy.rules}
        checks = {c.id: c for c in policy.checks}
    else:
        sensitive, rules = policy or Sensitive(), {}
    show = is_unmasked() if unmask is None else unmask
    return Masker(sensitive, rules, active=bool(sensitive) and not show, checks=checks)


def key_shape(keys: pa.Array | pa.ChunkedArray, *, letters: bool) -> pa.Array:
    """A key's *pattern*, vectorised: UUIDs as ``<uuid>``, digits as ``9``; with
    ``letters=True`` (a sensitive key) letters become ``a``/``A`` too, so no key text survives.
    Null keys read ``(no key)``, keys that are not UTF-8 ``(binary)``.

    Examples
    --------
    >>> key_shape(pa.array([b"order-0042", None, b"\\xff"]), letters=False).to_pylist()
    ['order-9999', '(no key)', '(binary)']
    >>> key_shape(pa.array([b"Bob-7"]), letters=True).to_pylist()
    ['Aaa-9']
    """
    arr = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    arr = arr.cast(pa.binary()) if arr.type != pa.binary() else arr
    valid = _utf8_valid(arr)
    try:
        text = pc.if_else(valid, arr, pa.scalar(b"", pa.binary())).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # an encoding the byte scan let through
        valid = pa.array(np.zeros(len(arr), dtype=bool))
        text = pa.array([""] * len(arr), pa.string())
    text = pc.replace_substring_regex(
        text, "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        "\x00")
    text = pc.replace_substring_regex(text, "[0-9]", "9")
    if letters:
        text = pc.replace_substring_regex(text, "[a-z]", "a")
        text = pc.replace_substring_regex(text, "[A-Z]", "A")
        text = pc.replace_substring_regex(text, "[^\x00-\x7f]", "?")
    text = pc.replace_substring(text, "\x00", "<uuid>")
    text = pc.utf8_slice_codeunits(text, 0, 48)
    text = pc.if_else(valid, text, pa.scalar("(binary)"))
    return pc.if_else(pc.is_null(arr), pa.scalar("(no key)"), text)


def _utf8_valid(arr: pa.Array) -> pa.Array:
    """Per value: decodes as UTF-8 (nulls count as valid).  Arrow validates whole arrays only,
    so invalid rows are located by a vectorised byte-class scan (continuation bytes must
    follow a lead byte; good enough to keep binary keys out of the text path)."""
    try:
        arr.cast(pa.string()).validate(full=True)
        return pa.array(np.ones(len(arr), dtype=bool))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    from kqlab.serde.wire import as_binary

    info_valid = np.ones(len(arr), dtype=bool)
    values = as_binary(arr)
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[values.offset:values.offset + len(values)
                                                         + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else \
        np.zeros(0, np.uint8)
    if not len(data):
        return pa.array(info_valid)
    # a byte is bad if it is never valid in UTF-8, or a continuation byte without a lead
    bad = (data >= 0xF8) | (data == 0xC0) | (data == 0xC1)
    cont = (data & 0xC0) == 0x80
    lead_need = np.where(data >= 0xF0, 3, np.where(data >= 0xE0, 2, np.where(data >= 0xC0, 1,
                                                                                0)))
    # expected continuation count at each position: a running budget from the last lead
    budget = np.zeros(len(data), dtype=np.int64)
    idx = np.flatnonzero(lead_need > 0)
    for k in (1, 2, 3):  # at most 3 continuation bytes: three shifted passes, no loop per byte
        pos = idx[lead_need[idx] >= k] + k
        pos = pos[pos < len(data)]
        budget[pos] = 1
    bad |= cont & (budget == 0)
    bad |= ~cont & (budget == 1)
    bad_pos = np.flatnonzero(bad)
    if len(bad_pos):
        rows = np.searchsorted(offsets, bad_pos, side="right") - 1
        info_valid[np.unique(rows[(rows >= 0) & (rows < len(arr))])] = False
    return pa.array(info_valid)
