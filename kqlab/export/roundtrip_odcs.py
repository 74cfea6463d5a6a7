"""Round trip of the ODCS contract: datacontract-cli's own ``test`` on the sample's values.

ODCS states rules and enforces none; the engine that runs an ODCS contract is a contract
tool.  datacontract-cli (in a virtualenv of its own, ``make setup-datacontract``, with its
DuckDB backend) is run here on the exported contract, to which one ``local`` server is added
per data set: JSON-lines files of the sample's decoded values (one row per record whose value
decodes to an object, as the replay decodes it).  Its per-check results (its JSON output:
``result`` and ``diagnostics.value``, the count of failing rows) are mapped to the rules they
come from — library metrics by their quality id, schema checks (``required``,
``logicalTypeOptions``) by the field rule that implies them
(:func:`kqlab.export.odcs._derived_constraints`).

A tool that counts gives no record coordinates, so the records are grouped by *which rules
the replay fails them for*; each group is one data set, and for each check the tool must count
every row of the group (the rule is among its failures) or none.  A group where it counts
anything else is split in halves and run again, down to single records: then every record's
outcome per check is known, and each rule's :class:`~kqlab.export.roundtrip.RuleCheck` is a
record-by-record comparison, as for the other engines.  On agreement that costs one tool run
per group (a handful); a disagreement costs about log2(group size) more rounds.

Not run by the tool, so left unchecked with the reason: custom quality rules (``engine:
kqlab``; other ODCS tools show them and run none), the key (no place in an ODCS schema: the
data set holds no key) and the value's decoding (the tool reads values already decoded).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kqlab.export.base import DECODE_KEY, DECODE_VALUE, SCHEMA_ID, ExportError
from kqlab.export.roundtrip import CONTROL, RoundTrip, SampleView, compare, compare_whole

__all__ = ["DATACONTRACT_VERSION", "datacontract_python", "roundtrip_odcs", "run_tool"]

#: the datacontract-cli scripts/setup-datacontract installs (its DATACONTRACT_CLI_VERSION)
DATACONTRACT_VERSION = os.environ.get("DATACONTRACT_CLI_VERSION", "1.2.8")
_SERVER = "kqlab-sample"
#: a schema check's type -> the field rule kind that implies it
_SCHEMA_KINDS = {"field_required": "field_not_null", "field_minimum": "field_range",
                 "field_maximum": "field_range", "field_min_length": "field_length",
                 "field_max_length": "field_length", "field_regex": "field_regex",
                 "field_type": "field_type"}
_UNDECODED = "value does not decode to an object: no row of the tool's data set"
#: bisection rounds at most (a 2**20-record group resolves in 20)
_ROUNDS = 24
#: the tool's test run per data set, in its own interpreter: the CLI's own code path
#: (DataContract.test) and its JSON results shape, one process for every data set of a round
_RUNNER = """
import json, sys
from datacontract.data_contract import DataContract
jobs = json.load(open(sys.argv[1]))
out = [json.loads(DataContract(data_contract_file=c, server=s).test().model_dump_json())
       for c, s in jobs]
json.dump(out, open(sys.argv[2], "w"))
"""


def _cache_dir() -> Path:
    base = os.environ.get("KQLAB_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kqlab"


def datacontract_python() -> Path:
    """The interpreter of datacontract-cli's own virtualenv (``KQLAB_DATACONTRACT_PYTHON``,
    else where scripts/setup-datacontract puts it); :class:`ExportError` says how to install
    it when it is missing or lacks the DuckDB backend that tests local files."""
    given = os.environ.get("KQLAB_DATACONTRACT_PYTHON")
    venv = _cache_dir() / f"datacontract-cli-{DATACONTRACT_VERSION}"
    python = Path(given) if given else venv / "bin" / "python"
    if not python.exists() or (not given and not (venv / ".kqlab-ok-duckdb").exists()):
        raise ExportError(f"datacontract-cli {DATACONTRACT_VERSION} with its DuckDB backend is "
                          f"not installed ({python} missing or incomplete): run `make "
                          "setup-datacontract` (scripts/setup-datacontract)")
    return python


def run_tool(python: Path, jobs: list[tuple[str, str]], tmp: Path, timeout: float
             ) -> list[dict[str, Any]]:
    """datacontract-cli's test of each ``(contract file, server)``: its JSON results."""
    runner, jobs_file, out = tmp / "run_tests.py", tmp / "jobs.json", tmp / "results.json"
    runner.write_text(_RUNNER, encoding="utf-8")
    jobs_file.write_text(json.dumps(jobs), encoding="utf-8")
    done = subprocess.run([str(python), str(runner), str(jobs_file), str(out)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp)
    if done.returncode != 0:
        raise ExportError(f"datacontract-cli's test failed (exit {done.returncode}): "
                          f"{done.stderr.strip().splitlines()[-1:]}")
    results: list[dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    return results


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _rule_of(check: dict[str, Any], rules: dict[str, Any]) -> str | None:
    """The rule a tool check comes from (None: no rule, or not one alone)."""
    qid = check.get("qualityId") or check.get("quality_id")
    if qid:
        return qid if qid in rules else None
    kind = _SCHEMA_KINDS.get(str(check.get("type")))
    if kind is None or check.get("category") != "schema" or not check.get("field"):
        return None
    found = [r.id for r in rules.values() if r.kind == kind and r.mode == "reject" and
             r.when is None and str(r.params.get("field")) == check["field"]]
    return found[0] if len(found) == 1 else None


def _tool_may_check(rule: Any) -> bool:
    """The rules the contract states in a form the tool runs: library metrics and the
    schema constraints of unconditional reject-mode field rules (records are grouped by
    these rules' failures only)."""
    from kqlab.export.odcs import _field_kinds, _standard

    return _standard(rule) is not None or (rule.kind in _field_kinds() and
                                           rule.mode == "reject" and rule.when is None)


def _counted(check: dict[str, Any]) -> int | None:
    """Rows the check counted as failing (None: it failed without a count)."""
    if check.get("result") == "passed":
        return 0
    value = (check.get("diagnostics") or {}).get("value")
    return int(value) if isinstance(value, int | float) else None


class _Rounds:
    """The bisection of the module docstring: groups of row indices run as data sets until
    the tool's count of each check is all or nothing in every group."""

    def __init__(self, view: SampleView, rows: np.ndarray, contract: dict[str, Any],
                 failed: dict[str, np.ndarray], tmp: Path, python: Path, timeout: float):
        self.view, self.contract, self.failed = view, contract, failed
        self.tmp, self.python, self.timeout = tmp, python, timeout
        self.lines = {int(i): json.dumps(view.datums.values[i], default=_plain,
                                         ensure_ascii=False) for i in rows.tolist()}
        #: per check key: its rule, and per record the tool's outcome (True: counted failing)
        self.rule: dict[str, str | None] = {}
        self.names: dict[str, str] = {}
        self.outcome: dict[str, dict[int, bool]] = {}
        #: per check key: records the tool could not judge, by its reason
        self.errors: dict[str, dict[str, list[int]]] = {}
        self.runs = 0
        self.datasets = 0
        sig: dict[tuple[str, ...], list[int]] = {}
        for i in rows.tolist():
            sig.setdefault(tuple(r for r, f in failed.items() if f[i]), []).append(int(i))
        self.groups = list(sig.values())

    def run(self) -> None:
        """Every round until no group is split (or :data:`_ROUNDS` ran)."""
        todo = self.groups
        for _ in range(_ROUNDS):
            if not todo:
                return
            todo = self._round(todo)
        raise ExportError(f"datacontract-cli's counts did not resolve to records within "
                          f"{_ROUNDS} rounds")

    def _round(self, groups: list[list[int]]) -> list[list[int]]:
        """One tool run: every group a schema object (model) of its own, read from its own
        file through one local server (``{model}`` in its path)."""
        import copy

        import yaml

        folder = self.tmp / f"round-{self.runs}"
        folder.mkdir()
        (obj,) = self.contract["schema"]
        models = []
        for n, g in enumerate(groups):
            name = f"g{n}"
            (folder / f"{name}.json").write_text("".join(self.lines[i] + "\n" for i in g),
                                                 encoding="utf-8")
            models.append({**copy.deepcopy(obj), "name": name, "physicalName": name})
        server = {"server": _SERVER, "type": "local", "path": str(folder / "{model}.json"),
                  "format": "json", "delimiter": "new_line"}
        contract = folder / "contract.odcs.yaml"
        contract.write_text(yaml.safe_dump({**self.contract, "schema": models,
                                            "servers": [server]}, sort_keys=False),
                            encoding="utf-8")
        (res,) = run_tool(self.python, [(str(contract), _SERVER)], folder, self.timeout)
        self.runs += 1
        self.datasets += len(groups)
        per_model: dict[str, list[dict[str, Any]]] = {}
        for c in res.get("checks", []):
            per_model.setdefault(str(c.get("model")), []).append(c)
        again: list[list[int]] = []
        for n, g in enumerate(groups):
            if self._settle(g, per_model.get(f"g{n}", [])):
                again.extend([g[:len(g) // 2], g[len(g) // 2:]])
        return again

    def _settle(self, g: list[int], checks: list[dict[str, Any]]) -> bool:
        """Record group ``g``'s outcome per check; True when it must be split."""
        split = False
        settled: list[tuple[str, bool | None, str]] = []
        for c in checks:
            key = str(c.get("key") or f"{c.get('engine')}:{c.get('name')}")
            key = key.split("__", 1)[1] if "__" in key else key  # the model's name first
            rule = _rule_of(c, self.rules)
            rule = rule if rule in self.failed else None
            self.rule.setdefault(key, rule)
            self.names.setdefault(key, str(c.get("name")))
            if c.get("result") not in ("passed", "failed"):
                settled.append((key, None, str(c.get("reason") or c.get("result"))))
                continue
            counted = _counted(c)
            if len(g) == 1 or rule is None:  # rule None: nothing to compare it with, said
                settled.append((key, c["result"] == "failed", ""))  # in the notes only
                continue
            # all or none of the group counted: each record's outcome is known, whatever
            # the replay says (a rule stated as several checks, e.g. a range as minimum and
            # maximum, has each check count only its own part of the rule's failures)
            if counted in (0, len(g)):
                settled.append((key, counted == len(g), ""))
            else:
                split = True
        if not split:
            for key, out, why in settled:
                for i in g:
                    if out is None:
                        self.errors.setdefault(key, {}).setdefault(why, []).append(i)
                    else:
                        self.outcome.setdefault(key, {})[i] = out
        return split

    @property
    def rules(self) -> dict[str, Any]:
        return {r.id: r for r in self.view.policy.rules}


def roundtrip_odcs(policy: Any, sample: Any = None, *, now: int | None = None,
                   view: SampleView | None = None, timeout: float = 600.0,
                   contract_text: str | None = None) -> RoundTrip:
    """The round trip of the module docstring.  ``contract_text``: a contract to give the
    tool instead of the export (one edited by hand: the tool judges what it is given, the
    claims compared are the export's)."""
    import yaml

    from kqlab.export.odcs import build
    from kqlab.export.roundtrip import replayer_of

    started = time.perf_counter()
    view = view or SampleView(policy, replayer_of(sample, now))
    rt = RoundTrip(target="odcs", ran=True, records=view.n,
                   serializer=f"datacontract-cli {DATACONTRACT_VERSION} test (DuckDB)")
    try:
        python = datacontract_python()
    except ExportError as exc:
        return RoundTrip(target="odcs", ran=False, reason=str(exc))
    ex = build(policy)
    text = contract_text if contract_text is not None else next(iter(ex.files.values()))
    contract = yaml.safe_load(text)
    objects = np.array([isinstance(v, dict) for v in view.datums.values], dtype=bool) \
        if policy.value.format in ("json", "avro", "protobuf") else np.zeros(view.n, bool)
    rows_mask = view.decodes & ~view.control & objects
    rows = np.flatnonzero(rows_mask)
    failed = {r.id: np.asarray(view.replay_failed(r.id), dtype=bool) for r in policy.rules
              if _tool_may_check(r)}
    if not len(rows):
        return RoundTrip(target="odcs", ran=False, reason="no sampled value decodes to an "
                         "object: the tool has no row to test")
    with tempfile.TemporaryDirectory(prefix="kqlab-odcs-") as tmp:
        rounds = _Rounds(view, rows, contract, failed, Path(tmp), python, timeout)
        try:
            rounds.run()
        except (ExportError, subprocess.TimeoutExpired) as exc:
            return RoundTrip(target="odcs", ran=False, reason=str(exc))
    _fill(rt, view, ex, rounds, rows_mask)
    rt.notes.append(f"datacontract-cli {DATACONTRACT_VERSION}'s own test (DuckDB backend) on "
                    f"the exported contract with local JSON-lines servers of the {len(rows)} "
                    f"decoded values, grouped by the replay's failing rules into "
                    f"{len(rounds.groups)} data set(s) (schema objects); {rounds.runs} run(s) of "
                    f"the tool, {rounds.datasets} data set(s) in all")
    rt.seconds = time.perf_counter() - started
    return rt


def _fill(rt: RoundTrip, view: SampleView, ex: Any, rounds: _Rounds,
          rows_mask: np.ndarray) -> None:
    """Each rule's checks as RuleChecks (the worst of a rule's checks stands), the whole
    contract's comparison, and why the other rows have no check."""
    excluded = {CONTROL: view.control.copy(),
                _UNDECODED: ~rows_mask & ~view.control}
    by_rule: dict[str, list[str]] = {}
    for key, rule in rounds.rule.items():
        if rule is None:
            said = "failed on some" if any(rounds.outcome.get(key, {}).values()) else \
                "passed on every"
            rt.notes.append(f"tool check {rounds.names[key]!r} maps to no single rule: "
                            f"{said} data set it ran on")
            continue
        by_rule.setdefault(rule, []).append(key)
    whole = np.zeros(view.n, dtype=bool)
    for rule, keys in by_rule.items():
        # the rule refuses a record when any of its checks does (a range: its minimum or
        # its maximum); a record any of them could not judge is not judged
        refused = np.zeros(view.n, dtype=bool)
        judged = rows_mask.copy()
        masks = dict(excluded)
        for key in keys:
            for i, out in rounds.outcome.get(key, {}).items():
                refused[i] |= out
            for why, idx in rounds.errors.get(key, {}).items():
                m = masks.setdefault(f"the tool did not judge it: {why}",
                                     np.zeros(view.n, dtype=bool))
                m[idx] = True
                judged[idx] = False
        check = compare(view, rule, refused, judged,
                        excluded={k: int(v.sum()) for k, v in masks.items() if v.any()})
        whole |= refused & judged
        rt.checks[rule] = check
        rt.notes.append(f"{rule}: tool check(s) " + ", ".join(repr(rounds.names[k])
                                                              for k in keys))
    rt.rules = [f.rule for f in ex.fidelity if f.rule in rt.checks]
    expected = np.zeros(view.n, dtype=bool)
    for rid in rt.rules:
        expected |= rounds.failed[rid]
    compare_whole(rt, view, whole, expected, rows_mask)
    rt.excluded = {k: int(v.sum()) for k, v in excluded.items() if v.any()}
    for rid in rt.rules:
        rt.by_rule[rid] = rt.checks[rid].refused
        rt.expected_by_rule[rid] = rt.checks[rid].expected
    for f in ex.fidelity:
        if f.rule in rt.checks or f.status == "not expressible":
            continue
        if f.rule == DECODE_KEY:
            why = "an ODCS schema describes the value: the tool's data set holds no key"
        elif f.rule in (DECODE_VALUE, SCHEMA_ID):
            why = ("the tool reads values already decoded (a value that does not decode is no "
                   "row of its data set): it decodes nothing")
        else:
            why = ("datacontract-cli ran no check for it: a custom quality rule (engine "
                   "kqlab), which ODCS tools show and do not run")
        rt.unchecked[f.rule] = why
