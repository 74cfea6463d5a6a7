"""A starter policy for a topic nobody has described yet: what ``kqlab init`` writes.

:func:`start_policy` takes a sample (a log folder, a segment, a snapshot — ``kqlab init``
samples a live topic into a snapshot first), guesses the key and value formats from its bytes
(:func:`kqlab.serde.infer.infer_format`), runs the rule suggestions on it with those formats
(:func:`kqlab.validate.rule_suggestion.suggest`: each count is the verdict core's, from the
replay of the policy with the suggestions), and writes the policy with every suggestion, one
YAML comment above each rule saying what was observed and what the replay does with it.

The file is written to a temporary name beside the target, loaded back with the policy
loader every command uses (:func:`~kqlab.sources.policy_files.load_policy_file`: a broken
file never replaces anything) and replayed on the same sample: the outcome counts of that
replay are the ones ``kqlab replay`` prints next, and the result carries them.  An existing
policy file is replaced only with ``force=True``.

Rule ids are the ones a person would write (``amount-range``, ``status-known``,
``trace-id-header``), not the suggestion ids (``suggest.field_range.amount``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kqlab.errors import KqlabError

if TYPE_CHECKING:
    from kqlab.policy.model import Policy, Rule
    from kqlab.serde.infer import FormatGuess
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.suggestions import Suggestion, Suggestions

__all__ = ["EmptySampleError", "InitResult", "PolicyExistsError", "human_id", "start_policy"]


class PolicyExistsError(KqlabError, FileExistsError):
    """The policy file to write exists already (``--force`` replaces it)."""


class EmptySampleError(KqlabError, ValueError):
    """The sample holds no record a client produced: nothing to infer a policy from."""


#: the id words of the kinds that have no target
_PLAIN = {"key_required": "key-required", "value_required": "value-required",
          "magic_byte": "magic-byte", "schema_id_registered": "schema-registered",
          "schema_id_allowed": "schema-ids", "key_size": "key-size",
          "value_size": "value-size", "headers_size": "headers-size",
          "record_size": "record-size"}
#: the suffix after a field's (or header's) name
_SUFFIX = {"field_not_null": "present", "field_type": "type", "field_range": "range",
           "field_in": "known", "field_regex": "format", "field_length": "length",
           "header_required": "header", "header_values": "values"}


def human_id(rule: Rule, taken: set[str]) -> str:
    """The id a person would give ``rule`` (``amount-range``), unique among ``taken``.

    Examples
    --------
    >>> from kqlab.policy.model import Rule
    >>> human_id(Rule(id="suggest.field_range.amount", kind="field_range",
    ...               params={"field": "customer.Amount"}), set())
    'customer-amount-range'
    >>> human_id(Rule(id="suggest.key_required", kind="key_required"), {"key-required"})
    'key-required-2'
    """
    target = rule.params.get("field", rule.params.get("name"))
    if rule.kind in _PLAIN or not isinstance(target, str):
        base = _PLAIN.get(rule.kind, rule.kind.replace("_", "-"))
    else:
        slug = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-") or "field"
        base = f"{slug}-{_SUFFIX.get(rule.kind, rule.kind.replace('_', '-'))}"
    out, n = base, 2
    while out in taken:
        out, n = f"{base}-{n}", n + 1
    taken.add(out)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class InitResult:
    """What :func:`start_policy` wrote and found.

    ``rules`` are the written rules with their evidence and the replay's counts; ``outcomes``
    the outcome counts of the written file replayed on the sample (what ``kqlab replay``
    prints); ``next_commands`` the commands to run next.
    """

    policy_path: Path
    sample: str
    topic: str
    records: int
    key: FormatGuess
    value: FormatGuess
    rules: tuple[dict[str, Any], ...]
    outcomes: dict[str, int]
    framing: str
    next_commands: tuple[str, ...]
    notes: tuple[str, ...] = ()
    duplicates: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """The ``kqlab init --json`` document."""
        return {"policy": str(self.policy_path), "sample": self.sample, "topic": self.topic,
                "records": self.records, "framing": self.framing,
                "key": self.key.to_dict(), "value": self.value.to_dict(),
                "rules": [dict(r) for r in self.rules], "outcomes": dict(self.outcomes),
                "next": list(self.next_commands), "notes": list(self.notes)}


def _quote(path: str) -> str:
    import shlex

    return shlex.quote(path)


def next_commands(sample: str, policy: Path, framing: str) -> tuple[str, ...]:
    """The three commands after ``init``, with the real paths: replay the sample, write its
    report, open the workbench on it in JupyterLab (absolute paths: the notebook's kernel
    runs in another folder)."""
    s, p = _quote(sample), _quote(str(policy))
    frame = "" if framing == "exact" else f" --framing {framing}"
    stem = policy.name.removesuffix(".yaml").removesuffix(".policy")
    reports = _quote(str(policy.parent / f"{stem}-report") + os.sep)
    cell = (f"import kqlab; kqlab.Workbench({str(Path(sample).resolve())!r}, "
            f"kqlab.load_policy({str(policy.resolve())!r}))")
    return (f"kqlab replay {s} --policy {p}{frame}",
            f"kqlab report {s} --policy {p}{frame} --out {reports}",
            f"jupyter lab   # then, in a notebook cell: {cell}")


def _starter(name: str, topic: str, key: FormatGuess, value: FormatGuess) -> Policy:
    """The policy before suggestions: the topic and the inferred formats (checked)."""
    from kqlab.policy import policy_from_dict

    data: dict[str, Any] = {"kqlab": 1, "name": name, "topics": {"names": [topic]},
                            "key": key.to_format(), "value": value.to_format()}
    return policy_from_dict(data, source="<kqlab init>")


def _counts(s: Suggestion) -> str:
    share = 100 * s.rejection_rate
    text = (f"replayed on the sample: {s.failed:,} of {s.records:,} records fail it, "
            f"{s.rejected:,} rejected ({share:.2f} %)")
    if s.evaluation_errors:
        text += f", {s.evaluation_errors:,} evaluation errors"
    if s.examples:
        e = s.examples[0]
        text += f"; first: {e.topic}-{e.partition}@{e.offset}: {e.message}"
    return text


def _comment(text: str, width: int = 96) -> list[str]:
    import textwrap

    return textwrap.wrap(" ".join(text.split()), width=width, initial_indent="# ",
                         subsequent_indent="#   ", break_long_words=True,
                         break_on_hyphens=False) or ["#"]


def _header(result: dict[str, Any]) -> list[str]:
    lines = [f"Starter policy written by `kqlab init` on {result['date']} from {result['sample']}"
             f" ({result['records']:,} records of topic {result['topic']}).",
             f"key: {result['key'].evidence}.", f"value: {result['value'].evidence}."]
    lines += [f"note: {n}" for n in result["notes"]]
    lines.append("Each rule's comment says what the sample showed and what replaying this file "
                 "on it does. Edit the rules, then run:")
    out = [c for line in lines for c in _comment(line)]
    return out + [f"#   {cmd}" for cmd in result["next"]]


def annotate(text: str, header: list[str], comments: dict[str, list[str]]) -> str:
    """The dumped policy ``text`` with ``header`` on top and each rule's comment lines above
    its ``- id:`` line (rules are the top-level ``rules:`` list of the canonical dump)."""
    out = [*header]
    in_rules = False
    for line in text.splitlines():
        if not line.startswith((" ", "-")):
            in_rules = line.startswith("rules:")
        m = re.match(r"- id: (\S+)$", line) if in_rules else None
        if m and m.group(1).strip("'\"") in comments:
            out += comments[m.group(1).strip("'\"")]
        out.append(line)
    return "\n".join(out) + "\n"


def _data_rows(replayer: Replayer) -> tuple[int, str]:
    """(records a client produced, the topic) of the sample; refuses an empty one."""
    import numpy as np
    import pyarrow.compute as pc

    records = replayer.sample.records
    produced = int((~replayer.control).sum()) if len(replayer.control) else 0
    if produced == 0:
        raise EmptySampleError("the sample holds no records (only transaction markers or "
                               "nothing at all): sample a range that has data, e.g. kqlab "
                               "init BOOTSTRAP TOPIC --latest 10000")
    topics = pc.unique(records.column("topic").filter(
        np.asarray(~replayer.control))).to_pylist()
    if len(topics) > 1:
        raise ValueError(f"the sample holds {len(topics)} topics ({', '.join(map(str, topics))})"
                         ": point kqlab init at one topic's partition folders")
    return produced, str(topics[0])


def _write_checked(path: Path, text: str, expect: Policy) -> Policy:
    """Write ``text`` to ``path`` through a temporary file that is first loaded back with the
    loader every command uses; the file is only moved into place when it loads to ``expect``."""
    from kqlab.sources.policy_files import load_policy_file

    tmp = path.with_name(f".{path.name}.kqlab-init-{os.getpid()}.yaml")
    tmp.write_text(text, encoding="utf-8")
    try:
        loaded = load_policy_file(str(tmp))
        if loaded.content_hash() != expect.content_hash():
            raise KqlabError(f"the policy written to {tmp} does not load back as built "
                             "(a kqlab bug: please report it)")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return loaded


def _named_rules(found: Suggestions) -> tuple[list[Rule], dict[str, list[str]],
                                              list[dict[str, Any]]]:
    """The suggestions as rules with human ids, each with its comment lines and row."""
    import dataclasses

    from kqlab.policy.model import thaw

    taken: set[str] = set()
    rules, comments, rows = [], {}, []
    for s in found:
        rule = dataclasses.replace(s.rule, id=human_id(s.rule, taken))
        rules.append(rule)
        comments[rule.id] = _comment(f"{s.source}: {s.evidence}") + _comment(_counts(s))
        rows.append({"id": rule.id, "kind": rule.kind, "rule": thaw(rule.to_dict()),
                     "source": s.source, "evidence": s.evidence, "records": s.records,
                     "failed": s.failed, "rejected": s.rejected,
                     "evaluation_errors": s.evaluation_errors})
    return rules, comments, rows


def start_policy(sample: Any, out: str | Path, *, shown_sample: str | None = None,
                 name: str | None = None, registry: str | None = None,
                 registry_config: dict[str, Any] | None = None, now: int | None = None,
                 framing: str | None = None, max_rejection: float = 0.01,
                 force: bool = False) -> InitResult:
    """Infer formats, suggest rules and write the starter policy for ``sample`` to ``out``.

    ``shown_sample`` is how the sample is named in the next commands (its path as the user
    typed it).  Raises :class:`PolicyExistsError` when ``out`` exists and not ``force``,
    :class:`EmptySampleError` for a sample without records.
    """
    from kqlab.serde.infer import infer_format
    from kqlab.validate.replayer import Replayer
    from kqlab.validate.rule_suggestion import _framing_of, suggest

    path = Path(out)
    if path.exists() and not force:
        raise PolicyExistsError(f"{path} exists: pass --force to replace it, or --out "
                                "another file")
    if path.is_dir():
        raise PolicyExistsError(f"{path} is a folder: --out names the policy file to write")
    used = _framing_of(sample, framing)
    replayer = Replayer(sample, now=now, framing=used)
    records, topic = _data_rows(replayer)
    data = replayer.sample.records.filter(_produced(replayer))
    key = infer_format(data.column("key"), "key", topic=topic, registry=registry,
                       registry_config=registry_config)
    value = infer_format(data.column("value"), "value", topic=topic, registry=registry,
                         registry_config=registry_config)
    policy = _starter(name or _slug(topic), topic, key, value)
    found = suggest(replayer, policy, max_rejection=max_rejection)
    rules, comments, rows = _named_rules(found)
    final = policy.with_rules(rules)
    shown = shown_sample if shown_sample is not None else str(sample)
    cmds = next_commands(shown, path, used)
    notes = (*key.notes, *value.notes, *found.notes)
    from kqlab.policy import dump_policy

    header = _header({"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "sample": shown,
                      "records": records, "topic": topic, "key": key, "value": value,
                      "notes": notes, "next": cmds})
    path.parent.mkdir(parents=True, exist_ok=True)
    loaded = _write_checked(path, annotate(dump_policy(final), header, comments), final)
    outcomes = replayer.run(loaded).by_outcome()
    return InitResult(policy_path=path, sample=shown, topic=topic, records=records, key=key,
                      value=value, rules=tuple(rows), outcomes=outcomes, framing=used,
                      next_commands=cmds, notes=notes,
                      duplicates=tuple(d.id for d in found.duplicates))


def _produced(replayer: Replayer) -> Any:
    import pyarrow as pa

    return pa.array(~replayer.control) if len(replayer.control) else \
        pa.array([], pa.bool_())


def _slug(topic: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", topic.lower()).strip("-.") or "topic"
