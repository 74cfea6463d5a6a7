"""What every exporter shares: the :class:`Export` result, per-rule fidelity, provenance, secrets.

An exporter turns a vetted :class:`~kqlab.policy.model.Policy` into the files one enforcement
target takes (ARCHITECTURE "export").  Each says, rule by rule, how faithfully the target
enforces it (:class:`RuleFidelity`: ``exact``, ``approximate`` with how, or ``not
expressible`` with why) and how the target behaves differently from the replay (client-side
versus broker-side, whole batch versus per record), so an analyst never has to assume
fidelity (principle 4).  Every file carries the policy's provenance where its format allows
comments or metadata, and never a secret: schema-registry credentials stay in the policy's
``schemas.config`` and :func:`check_no_secrets` refuses any export that would leak one.

Generated files are deterministic and portable: two exports of one policy are byte-identical
(no export date inside them; the vetting date comes from the policy's own provenance, the
export date lives in the fidelity report's ``run`` section) and hold no absolute path (a
vetting sample named by an absolute path is shown by its last component).

A row's ``status`` is the exporter's *claim*.  Whether it holds is measured by running the
target's own engine on the vetting sample (:mod:`kqlab.export.fidelity`): a claim of ``exact``
becomes a proven ``exact``, is ``withdrawn`` when the engine disagrees, or stays
``unverified`` when nothing ran.  This module imports nothing heavy (no pyarrow, no Kafka
client).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kqlab.errors import KqlabError
from kqlab.policy.message_params import params_filled

__all__ = [
    "APPROXIMATE",
    "CHECK_STATUSES",
    "DECODE_KEY",
    "DECODE_VALUE",
    "ENFORCED",
    "EXACT",
    "NOT_ENFORCED",
    "NOT_EXPRESSIBLE",
    "SCHEMA_ID",
    "STATED",
    "STATUSES",
    "UNVERIFIED",
    "VERDICTS",
    "WITHDRAWN",
    "CheckFidelity",
    "Export",
    "ExportError",
    "RuleFidelity",
    "check_no_secrets",
    "comment_block",
    "implicit_row",
    "implicit_rules",
    "portable_path",
    "provenance",
    "public_url",
    "rule_lines",
    "secrets_of",
]

EXACT, APPROXIMATE, NOT_EXPRESSIBLE = "exact", "approximate", "not expressible"
#: what an exporter may claim for a rule
STATUSES = (EXACT, APPROXIMATE, NOT_EXPRESSIBLE)
#: what the fidelity report concludes besides the claims: an ``exact`` claim no engine checked
#: here, and one the target's own engine contradicted on the vetting sample
UNVERIFIED, WITHDRAWN = "unverified", "withdrawn"
VERDICTS = (EXACT, APPROXIMATE, NOT_EXPRESSIBLE, UNVERIFIED, WITHDRAWN)
#: how a target carries a sample check (``checks:``): ``enforced`` — the target computes it
#: itself (the Structured Streaming enforcer judges each closed window and sends an alert
#: row), ``stated`` in a contract other tools read (not run by the target itself), or ``not
#: enforced`` — targets judging one record at a time have no place for a windowed aggregate
#: over the topic
ENFORCED, STATED, NOT_ENFORCED = "enforced", "stated", "not enforced"
CHECK_STATUSES = (ENFORCED, STATED, NOT_ENFORCED)
#: the label every export of a proposed (unimplemented) Kafka API carries
PROPOSED = "proposed API, not in Apache Kafka"


class ExportError(KqlabError, ValueError):
    """The policy cannot be exported to this target as asked (the message says why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleFidelity:
    """How one rule fares on one target: ``status`` in :data:`STATUSES` and ``how`` (or why not).

    Examples
    --------
    >>> RuleFidelity(rule="k", kind="key_required", status="exact", how="allowNulls: false")
    ... # doctest: +ELLIPSIS
    RuleFidelity(rule='k', kind='key_required', status='exact', how='allowNulls: false', ...)
    """

    rule: str
    kind: str
    status: str
    how: str
    mode: str = "reject"
    #: a check nobody wrote as a rule: the replay's implicit decoding, or one the target
    #: applies on its own (a key schema decodes keys, a serializer pins schema ids)
    implicit: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not "
                             f"{self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (one row of the fidelity report)."""
        out: dict[str, Any] = {"rule": self.rule, "kind": self.kind, "mode": self.mode,
                               "status": self.status, "how": self.how}
        if self.implicit:
            out["implicit"] = True
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckFidelity:
    """How one sample check fares on one target: ``status`` in :data:`CHECK_STATUSES` and
    ``how`` (or why not).  Checks never refuse a record, so no round trip proves them and
    a check not enforced is never a reason to fail an export."""

    check: str
    kind: str
    status: str
    how: str

    def __post_init__(self) -> None:
        if self.status not in CHECK_STATUSES:
            raise ValueError(f"status must be one of {', '.join(CHECK_STATUSES)}, not "
                             f"{self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (one row of the fidelity report's checks)."""
        return {"check": self.check, "kind": self.kind, "status": self.status,
                "how": self.how}


@dataclass(frozen=True, kw_only=True)
class Export:
    """One target's export of one policy: its files, per-rule fidelity and behaviour notes.

    ``files`` maps a relative path (``kroxylicious/proxy-config.yaml``) to its text;
    ``data`` holds the same content as plain Python data for programmatic use (e.g. the
    register body a ``SchemaRegistryClient`` takes); ``behaviour`` lists the expected
    differences from the replay; ``notes`` anything else a reader must know.
    """

    target: str
    title: str
    policy: str
    files: Mapping[str, str]
    fidelity: tuple[RuleFidelity, ...]
    behaviour: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    proposed: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)
    #: rules that cannot mean what they say here (e.g. a range over a timestamp field fails
    #: every record, in the replay and in the target alike): said, never silently exported
    warnings: tuple[str, ...] = ()
    #: the policy's sample checks as this target carries them (empty: the fidelity report
    #: lists each as not enforced)
    checks: tuple[CheckFidelity, ...] = ()

    def counts(self) -> dict[str, int]:
        """The policy's rules per fidelity status (every status listed; implicit rows, which
        are no rule of the policy, are not counted)."""
        out = dict.fromkeys(STATUSES, 0)
        for f in self.fidelity:
            if not f.implicit:
                out[f.status] += 1
        return out

    def status_of(self, rule_id: str) -> RuleFidelity:
        """The fidelity row of one rule (``KeyError`` when the rule is not in the policy)."""
        for f in self.fidelity:
            if f.rule == rule_id:
                return f
        raise KeyError(f"no rule {rule_id!r} in the {self.target} export of {self.policy!r}")

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write every file under ``out_dir`` (folders created); the paths written."""
        root = Path(out_dir)
        written = []
        for rel, text in sorted(self.files.items()):
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
        return written

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (file names, not their text)."""
        return {"target": self.target, "title": self.title, "policy": self.policy,
                "proposed": self.proposed, "files": sorted(self.files),
                "counts": self.counts(), "fidelity": [f.to_dict() for f in self.fidelity],
                "behaviour": list(self.behaviour), "notes": list(self.notes),
                "warnings": list(self.warnings), "checks": [c.to_dict() for c in self.checks]}


# ------------------------------------------------------------------------------ provenance

def provenance(policy: Any, *, today: str | None = None) -> dict[str, Any]:
    """The provenance every export embeds: policy name, format version, content hash, the
    vetting sample's coordinates and counts, the vetting date, and the exporter's version.

    ``vetted`` says whether the policy carries provenance at all, ``hash_matches`` whether
    its rules are still the vetted ones (a policy edited after vetting exports with
    ``hash_matches: false``, visibly).  No export date unless ``today`` is given: files that
    carry one differ every day, so the exporters of this package never pass it.

    Examples
    --------
    >>> from kqlab.policy.model import Policy
    >>> p = provenance(Policy(name="orders"))
    >>> p["policy"], p["vetted"], "exported_at" in p
    ('orders', False, False)
    """
    from kqlab._version import __version__

    content_hash = policy.content_hash()
    out: dict[str, Any] = {
        "policy": policy.name,
        "format_version": policy.version,
        "content_hash": content_hash,
        "vetted": policy.provenance is not None,
        "exporter": f"kqlab {__version__}",
    }
    if today is not None:
        out["exported_at"] = today
    prov = policy.provenance
    if prov is not None:
        from kqlab.policy.model import thaw

        sample = thaw(prov.sample)
        if isinstance(sample, dict) and isinstance(sample.get("source"), str):
            sample = {**sample, "source": portable_path(sample["source"])}
        out.update({
            "vetted_at": prov.vetted_at,
            "vetted_hash": prov.content_hash,
            "hash_matches": prov.content_hash == content_hash,
            "sample": sample,
            "records": prov.records,
            "batches": prov.batches,
            "rejected_records": prov.rejected_records,
        })
    return out


def portable_path(text: str) -> str:
    """``text`` as an export may show it: an absolute path by its last component (a machine's
    folders mean nothing elsewhere), anything else unchanged.

    Examples
    --------
    >>> portable_path("/home/ann/samples/orders-0"), portable_path("demo/orders")
    ('orders-0', 'demo/orders')
    """
    for flavour in (PurePosixPath, PureWindowsPath):
        p = flavour(text)
        if p.is_absolute():
            return p.name or text
    return text


def _sample_text(sample: Mapping[str, Any]) -> str:
    """The sample coordinates as one line.  A sample written by ``--vet`` has partitions of
    ``{topic, partition, offsets: [lo, hi]}``; a hand-written one may hold anything (the schema
    only asks for an object), so whatever does not have that shape is shown as written rather
    than dropped or crashing the export."""
    parts = []
    partitions = sample.get("partitions")
    if isinstance(partitions, list) and all(isinstance(p, Mapping) for p in partitions):
        for p in partitions:
            offsets = p.get("offsets")
            if isinstance(offsets, list) and len(offsets) == 2:
                parts.append(f"{p.get('topic')}-{p.get('partition')}@{offsets[0]}..{offsets[1]}")
            else:
                parts.append(_plain(p))
    elif partitions is not None:
        parts.append(f"partitions={_plain(partitions)}")
    known = ("source", "framing", "now", "profile")
    extra = [f"{k}={_plain(sample[k])}" for k in known if sample.get(k) is not None]
    extra += [f"{k}={_plain(v)}" for k, v in sample.items()
              if k not in known and k != "partitions" and v is not None]
    return "; ".join(x for x in (", ".join(parts), ", ".join(extra)) if x)


def _plain(value: Any) -> str:
    """A value of a hand-written sample as compact JSON-like text (strings bare)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def provenance_lines(prov: Mapping[str, Any]) -> list[str]:
    """The provenance as short ``key: value`` lines, for formats with comments."""
    exported = f"exported by {prov['exporter']}"
    if prov.get("exported_at"):
        exported = f"exported: {prov['exported_at']} by {prov['exporter']}"
    lines = [f"policy: {prov['policy']} (kqlab format {prov['format_version']})",
             f"content hash: {prov['content_hash']}", exported]
    if not prov["vetted"]:
        lines.append("vetted: no (the policy carries no provenance; replay it with --vet)")
        return lines
    match = "matches" if prov.get("hash_matches") else "DIFFERS from the content hash"
    lines.append(f"vetted: {prov.get('vetted_at')} (vetted hash {match})")
    sample = prov.get("sample") or {}
    if sample:
        lines.append(f"sample: {_sample_text(sample)}")
    lines.append(f"counts: {prov.get('records')} records, {prov.get('batches')} batches, "
                 f"{prov.get('rejected_records')} rejected")
    return lines


def provenance_properties(prov: Mapping[str, Any]) -> dict[str, str]:
    """The provenance as flat ``kqlab.*`` string properties (metadata maps take strings)."""
    out = {"kqlab.policy": str(prov["policy"]),
           "kqlab.format_version": str(prov["format_version"]),
           "kqlab.content_hash": str(prov["content_hash"]),
           "kqlab.exporter": str(prov["exporter"]),
           "kqlab.vetted": "true" if prov["vetted"] else "false"}
    if prov.get("exported_at"):
        out["kqlab.exported_at"] = str(prov["exported_at"])
    if prov["vetted"]:
        out.update({"kqlab.vetted_at": str(prov.get("vetted_at")),
                    "kqlab.vetted_hash": str(prov.get("vetted_hash")),
                    "kqlab.sample": _sample_text(prov.get("sample") or {}),
                    "kqlab.sample.records": str(prov.get("records")),
                    "kqlab.sample.batches": str(prov.get("batches")),
                    "kqlab.sample.rejected_records": str(prov.get("rejected_records"))})
    return out


def rule_lines(rules: Iterable[Any], status: Mapping[str, str] | None = None) -> list[str]:
    """One comment line per rule — id, kind, severity, mode and what it is for (its
    description, else its message) — so a config file names what it enforces; with
    ``status`` (rule id → fidelity) each line also says how the target takes it.

    Examples
    --------
    >>> from kqlab.policy.model import Rule
    >>> rule_lines([Rule(id="k", kind="key_required", description="orders are keyed")])
    ['rule k (key_required, severity error, reject): orders are keyed']
    """
    out = []
    for r in rules:
        what = r.description or params_filled(r) or ""
        head = f"rule {r.id} ({r.kind}, severity {r.severity}, {r.mode})"
        if status is not None and r.id in status:
            head += f" [{status[r.id]}]"
        out.append(f"{head}: {what}".rstrip(": ").replace("\n", " "))
    return out


def comment_block(lines: Iterable[str], prefix: str = "# ") -> str:
    """``lines`` as a comment block (one ``prefix`` per line), ending with a newline."""
    return "".join(f"{prefix}{line}".rstrip() + "\n" for line in lines)


# ------------------------------------------------------------------------- implicit checks

#: the implicit rows of the fidelity tables: the replay's own decoding of the value (when the
#: policy has no decode rule), the decoding of the key (which the replay never does: a target
#: that decodes keys refuses records the replay accepts) and, for Confluent-framed values, the
#: schema-id allowlist the decoding implies (the id must resolve in the schema source)
DECODE_VALUE, DECODE_KEY, SCHEMA_ID = "decode:value", "decode:key", "schema-id:value"


def implicit_rules(policy: Any) -> list[Any]:
    """The implicit checks of ``policy`` as rules (ids :data:`DECODE_VALUE`,
    :data:`DECODE_KEY`, :data:`SCHEMA_ID`), in that order, those that apply.

    ``decode:value`` is the rule the replay adds (:func:`~kqlab.validate.replayer.
    with_implicit_rules`); the other two are pseudo-rules whose replay semantics the round
    trips define (:mod:`kqlab.export.roundtrip`): keys are never decoded, and a framed value
    passes the allowlist when its id resolves.
    """
    from kqlab.policy.model import Rule
    from kqlab.validate.replayer import with_implicit_rules
    from kqlab.validate.rules import DECODE_KINDS

    out = [r for r in with_implicit_rules(policy).rules if r.id == DECODE_VALUE]
    key_decoded = any(r.kind in DECODE_KINDS and r.param("target") == "key"
                      for r in policy.rules)
    if policy.key.format in ("string", "json", "avro", "protobuf") and not key_decoded:
        out.append(Rule(id=DECODE_KEY, kind="decodable", params={"target": "key"},
                        description="keys are not decoded by the replay: no record is "
                        "rejected for its key's encoding"))
    if policy.value.wire == "confluent" and policy.value.format in ("avro", "protobuf"):
        out.append(Rule(id=SCHEMA_ID, kind="schema_id_registered",
                        description="the value's schema id resolves in the policy's schema "
                        "source (implied by decoding a Confluent-framed value)"))
    return out


def implicit_row(rule: Any, status: str, how: str) -> RuleFidelity:
    """A fidelity row of an implicit check."""
    return RuleFidelity(rule=rule.id, kind=rule.kind, status=status, how=how, mode=rule.mode,
                        implicit=True)


# --------------------------------------------------------------------------------- secrets

def public_url(url: str | None) -> str | None:
    """``url`` without user info, query or fragment (what may appear in an export).

    Examples
    --------
    >>> public_url("https://user:s3cret@registry.example.com:8081/path?token=x")
    'https://registry.example.com:8081/path'
    """
    if url is None:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


#: parts of a config key whose value is a secret (registry client and SSL/SASL settings)
_SENSITIVE = ("password", "secret", "user.info", "token", "bearer", "private", "jaas",
              "client.id", "key.pem", "credential.value")


def secrets_of(policy: Any) -> list[str]:
    """Every text of the policy that must never reach an export: the values of the schema
    sources' sensitive ``config`` keys (credentials, tokens, key passwords; the user part of
    ``user:password`` too) and user info in registry URLs."""
    out: list[str] = []
    for fmt in (policy.key, policy.value):
        src = fmt.schemas
        if src is None:
            continue
        for key, value in (src.config or {}).items():
            if not any(word in str(key).lower() for word in _SENSITIVE):
                continue  # e.g. basic.auth.credentials.source: USER_INFO is a setting
            text = str(value)
            out.append(text)
            out.extend(part for part in text.split(":") if len(part) >= 4)
        if src.registry:
            parts = urlsplit(src.registry)
            out.extend(x for x in (parts.password, parts.username) if x)
            if parts.query:
                out.append(parts.query)
    # short values (e.g. "true", a port) are configuration, not secrets, and would match
    # by accident; anything of four characters or more is looked for
    return sorted({s for s in out if len(s) >= 4})


def check_no_secrets(export: Export, policy: Any) -> Export:
    """``export`` unchanged, or :class:`ExportError` when any file or data holds a secret."""
    secrets = secrets_of(policy)
    if not secrets:
        return export
    blobs = dict(export.files)
    blobs["<data>"] = json.dumps(export.data, default=str)
    for name, text in blobs.items():
        for s in secrets:
            if s in text:
                raise ExportError(f"the {export.target} export would contain a secret from the "
                                  f"policy's schema source config (in {name}); refusing")
    return export
