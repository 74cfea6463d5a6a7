"""The batch-validator fuzzer (``scripts/fuzz_validator.py``), in process, plus its found bugs.

``test_fuzz_20k_cases`` runs the script's core (:func:`run_fuzz`) on 20 000 mutated inputs
with a fixed seed: no crash, no hang, no invalid verdict, and the two engines agree
(``broker_verdicts`` with ``raw=`` row for row; without it equal or marked undetermined).
The long run (a million cases, ``--jobs 2``) is the script's own job; this keeps a slice of
it in every test run.

The harness tests prove the fuzzer can fail: a crashing, a slow and a lying engine, a verdict
that reads a field the broker never validates (metamorphic oracle) and one that depends on
what the process decoded before (history oracle) are each reported.  ``fuzz_seeds/`` holds
the minimal inputs of bugs the fuzzer found; each is replayed through every stage and setup
(in a fresh interpreter when the bug is state left in a module).  Seeds whose fix could not
be applied here are strict xfails naming the bug (remove the entry from :data:`KNOWN_BUGS`
once it is fixed).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parents[1] / "scripts" / "fuzz_validator.py"
SEEDS = HERE / "fuzz_seeds"

#: seed file -> (the bug it shows, the finding signatures it causes).  Each seed is a strict
#: xfail until the fix lands; the 20k run tolerates only those signatures meanwhile.  Remove
#: an entry when its seed passes (strict: the test then fails as XPASS, as a reminder).
KNOWN_BUGS: dict[str, tuple[str, str]] = {}
#: seed file -> whether its bug can show here (a bug of one kernel or library, say; absent:
#: it can)
BUG_APPLIES: dict[str, bool] = {}


def _load_script():
    spec = importlib.util.spec_from_file_location("kqlab_fuzz_validator", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fuzz = _load_script()

#: checks the mutations must reach on 20 000 cases (the deep ones need a fixed-up CRC)
DEEP_CHECKS = {"A1", "A4.a", "A4.b", "A4.d", "B0", "C1", "C3", "D2.b", "D2.c", "D2.d",
               "D2.e", "D2.f", "D3", "R4"}


def _unknown(result: dict) -> list[dict]:
    """The findings not explained by a known bug (with its seed below)."""
    patterns = [re.compile(p) for name, (_, p) in KNOWN_BUGS.items()
                if BUG_APPLIES.get(name, True)]
    return [s for s in result["signatures"]
            if not any(p.search(f"{s['kind']}|{s['signature']}") for p in patterns)]


def test_fuzz_20k_cases() -> None:
    cpu0 = time.process_time()
    result = fuzz.run_fuzz(20_000, seed=20261125, jobs=1)
    cpu = time.process_time() - cpu0
    assert result["cases"] == 20_000
    # no crash, hang, invalid verdict or engine mismatch, but for the known bugs' own
    assert _unknown(result) == []
    # every input ended as a verdict of the primary setup, with a known code
    assert sum(result["verdicts"].values()) == 20_000
    assert set(result["checks"]) >= DEEP_CHECKS, set(result["checks"])
    # every metamorphic relation applied to hundreds of cases (and held: no mismatch above)
    assert min(result["metamorphic"].values()) > 200, result["metamorphic"]
    assert len(result["metamorphic"]) == len(fuzz.METAMORPHIC)
    # the differential compared far more batch rows than cases (several setups per group)
    assert result["log_rows"] > 3 * 20_000
    assert {"0 NONE", "2 CORRUPT_MESSAGE", "87 INVALID_RECORD", "32 INVALID_TIMESTAMP",
            "45 OUT_OF_ORDER_SEQUENCE_NUMBER"} <= set(result["log_verdicts"])
    # the cost per case, as CPU time: ~15 s here (wall time ~16 s on an idle 2-core machine,
    # more when other work shares the cores)
    assert cpu < 40, f"20 000 cases took {cpu:.0f} s of CPU"


# -- the harness can fail ------------------------------------------------------------------------


def test_a_crashing_engine_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = fuzz.broker_verdicts

    def crashing(records, batches, *args, **kwargs):
        if batches.num_rows and 2 in batches["magic"].to_pylist():
            sizes = batches["size_bytes"].to_pylist()
            if any(s is not None and s % 7 == 3 for s in sizes):
                raise RuntimeError("boom")
        return real(records, batches, *args, **kwargs)

    monkeypatch.setattr(fuzz, "broker_verdicts", crashing)
    result = fuzz.run_fuzz(256, seed=3, jobs=1, save_dir=tmp_path)
    assert result["crashes"] > 0
    sig = next(s for s in result["signatures"] if s["kind"] == "crash")
    assert "RuntimeError" in sig["signature"]
    # the group was split: each crash is attributed to one case with its input, replayable
    saved = [json.loads(Path(p).read_text()) for p in result["saved"]]
    crash = next(d for d in saved if d["kind"] == "crash")
    assert crash["case"] is not None and crash["input"]
    monkeypatch.setattr(fuzz, "broker_verdicts", real)
    assert fuzz.replay_file(next(p for p in result["saved"] if "crash-" in p)) == []


def test_a_lying_engine_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fuzz.broker_verdicts

    def lying(records, batches, *args, **kwargs):
        out = real(records, batches, *args, **kwargs)
        field = out.schema.field("error_code")
        flipped = [87 if c == 0 else c for c in out["error_code"].to_pylist()]
        return out.set_column(out.schema.get_field_index("error_code"), field,
                              pa.array(flipped, field.type))

    monkeypatch.setattr(fuzz, "broker_verdicts", lying)
    result = fuzz.run_fuzz(128, seed=4, jobs=1)
    assert result["mismatches"] > 0
    assert any("error_code" in s["signature"] for s in result["signatures"])


def test_a_slow_engine_is_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fuzz.PartitionValidator.validate
    calls = {"n": 0}

    def slow(self, data, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            time.sleep(1.0)
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(fuzz, "CASE_SECONDS", 0.3)
    monkeypatch.setattr(fuzz.PartitionValidator, "validate", slow)
    result = fuzz.run_fuzz(16, seed=5, jobs=1)
    assert result["hangs"] >= 1
    assert result["cases"] == 16


def test_a_verdict_that_reads_an_unvalidated_field_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The metamorphic oracle: changing partitionLeaderEpoch must not change a verdict."""
    real = fuzz.PartitionValidator.validate

    def peeking(self, data, *args, **kwargs):
        out = real(self, data, *args, **kwargs)
        if len(data) > 16 and data[16] == 2 and data[12:16] != b"\xff" * 4:
            out.detail = "looked at the partition leader epoch"
        return out

    monkeypatch.setattr(fuzz.PartitionValidator, "validate", peeking)
    monkeypatch.setattr(fuzz, "LOG_PER_GROUP", 0)  # the stream differential would see it too
    result = fuzz.run_fuzz(512, seed=6, jobs=1)
    assert result["metamorphic"]["partition-leader-epoch"] > 10
    assert any(s["signature"].startswith("metamorphic|partition-leader-epoch|")
               for s in result["signatures"])


def test_state_left_behind_is_a_history_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The history oracle: a verdict that depends on what the process decoded before."""
    real_decode, real_validate = fuzz.decode_batches, fuzz.PartitionValidator.validate
    decoded = {"calls": 0}

    def counting_decode(*args, **kwargs):
        decoded["calls"] += 1
        return real_decode(*args, **kwargs)

    def leaky(self, data, *args, **kwargs):
        out = real_validate(self, data, *args, **kwargs)
        if out.error_code != 0:
            out.detail = f"{out.detail} (after {decoded['calls']} decodes)"
        return out

    monkeypatch.setattr(fuzz, "decode_batches", counting_decode)
    monkeypatch.setattr(fuzz.PartitionValidator, "validate", leaky)
    monkeypatch.setattr(fuzz, "LOG_PER_GROUP", 0)
    result = fuzz.run_fuzz(512, seed=8, jobs=1)
    assert result["history_checks"] == 256
    assert any(s["signature"].startswith("history|") for s in result["signatures"])


def test_cases_are_reproducible() -> None:
    corpus = fuzz.corpus()
    a = [fuzz.make_case(9, i, corpus)[0] for i in range(50)]
    b = [fuzz.make_case(9, i, corpus)[0] for i in range(50)]
    assert a == b
    assert len(set(a)) > 40


# -- regression seeds ----------------------------------------------------------------------------


def _seed_params() -> list:
    params = []
    for path in sorted(SEEDS.glob("*.json")):
        marks = []
        if path.name in KNOWN_BUGS and BUG_APPLIES.get(path.name, True):
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[path.name][0]))
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


@pytest.mark.parametrize("path", _seed_params())
def test_regression_seed(path: Path) -> None:
    doc = fuzz.load_finding(path)
    assert doc["input"] or doc["pieces"]
    if (doc.get("details") or {}).get("fresh_process"):
        # a finding about state left in modules: replayed in a fresh interpreter, where the
        # state is known (this process has decoded who knows what before)
        run = subprocess.run([sys.executable, str(SCRIPT), "--replay", str(path)],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        return
    found = fuzz.replay_file(path)
    assert found == [], [(f.kind, f.signature, f.message[-300:]) for f in found]


def test_known_bugs_have_seeds() -> None:
    assert set(KNOWN_BUGS) <= {p.name for p in SEEDS.glob("*.json")}
