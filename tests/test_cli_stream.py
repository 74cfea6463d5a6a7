"""``kqlab replay`` on log segments streams (``replay_stream``) and says exactly what the
whole-sample replay says: the summary, the verdict tables written with ``--out`` and the
clock, for a partition folder, a segment file and a log directory of several topics."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from kqlab.cli import main
from kqlab.policy import load_policy
from kqlab.sources.demo import demo_policy_path, write_demo_segment
from kqlab.validate import replay

NOW = 1_700_000_000_000


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """A partition folder and a log directory holding it twice (two topics)."""
    root = tmp_path_factory.mktemp("logs")
    folder = write_demo_segment(root / "one", NOW)
    logdir = root / "data"
    for name in ("orders-0", "payments-2"):
        shutil.copytree(folder, logdir / name)
    return folder, logdir


def _cli(capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    return json.loads(out)


@pytest.mark.parametrize("which", ["folder", "segment", "logdir"])
@pytest.mark.parametrize("now", [None, NOW])
def test_streamed_cli_equals_the_whole_sample_replay(logs, tmp_path, capsys, which, now):
    folder, logdir = logs
    source = {"folder": folder, "segment": next(folder.glob("*.log")), "logdir": logdir}[which]
    policy = str(demo_policy_path())
    argv = ["replay", str(source), "--policy", policy, "--json", "--out", str(tmp_path / "v")]
    if now is not None:
        argv += ["--now", str(now)]
    doc = _cli(capsys, argv)
    whole = replay(source, load_policy(policy), now=now)
    want = whole.summary()
    assert doc.pop("clock") == ("given" if now is not None else "sample")
    assert doc.pop("out") == str(tmp_path / "v")
    # the CLI's own words about the rules (issue 30): the demo policy's rules all see fields
    assert doc.pop("rule_findings") == [] and doc.pop("strict_failed") is False
    assert doc == json.loads(json.dumps(want))
    for name, table in (("records", whole.records), ("batches", whole.batches),
                        ("rules", whole.rules)):
        assert pq.read_table(tmp_path / "v" / f"{name}.parquet").equals(table), name
