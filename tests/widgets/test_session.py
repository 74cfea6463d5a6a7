"""The authoring session on its own (no widget): the single source of truth the workbench's
views observe — what it publishes, its history, refused edits, suggestions and golden
examples, the engines it re-judges with — and that it imports no widget toolkit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kqlab.authoring import AuthoringSession, EditError, SessionChange, SessionError
from kqlab.validate import Replayer, replay
from tests.viz.conftest import NOW


@pytest.fixture
def session(orders_dir):
    root, policy = orders_dir
    return AuthoringSession(policy, root, now=NOW)


def test_the_session_imports_no_widget_toolkit_and_kqlab_exports_it_lazily():
    code = ("import sys, kqlab; assert 'kqlab.authoring' not in sys.modules; "
            "S = kqlab.AuthoringSession; import kqlab.authoring as a; assert S is "
            "a.AuthoringSession; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('ipywidgets', 'plotly', 'anywidget', 'IPython', 'pyspark')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip().splitlines()[-1]
    assert out == "[]"


def test_observers_hear_every_change_and_can_leave(session):
    heard: list[SessionChange] = []
    callback = session.observe(heard.append)
    session.update_rule("amount-range", min=50)
    session.suggest()
    with pytest.raises(EditError):
        session.remove_rule("nope")
    assert [(c.action, "verdicts" in c, "error" in c) for c in heard] == [
        ("edit", True, True), ("suggest", False, False), ("error", False, True)]
    assert all(c.session is session for c in heard)
    session.unobserve(callback)
    session.undo()
    assert len(heard) == 3


def test_undo_redo_and_refused_edits_keep_one_consistent_state(session, orders_dir):
    root, policy = orders_dir
    start = session.verdicts.by_outcome()
    session.update_rule("amount-range", min=50)
    session.set_mode("traceparent", "observe")
    edited = session.policy
    assert session.previous_policy.rule("traceparent").mode == "reject"
    session.undo()
    session.undo()
    assert session.policy == policy and session.verdicts.by_outcome() == start
    assert session.history == [] and len(session.future) == 2
    session.redo()
    session.redo()
    assert session.policy == edited and session.future == []
    assert session.verdicts.by_outcome() == replay(root, edited, now=NOW).by_outcome()
    with pytest.raises(EditError, match="nothing to redo"):
        session.redo()
    before = (session.policy, session.verdicts, list(session.history))
    with pytest.raises(EditError, match="whole number"):
        session.update_rule("value-size", max="big")
    assert (session.policy, session.verdicts, session.history) == before
    assert "whole number" in session.error
    session.set_severity("avro", "warning")  # an accepted edit clears the error
    assert session.error is None
    session.update_rule("amount-range", min=10)
    assert session.future == []  # a new edit forgets what was undone


def test_numbers_come_from_the_current_verdicts_once(session, orders_dir):
    root, _ = orders_dir
    session.update_rule("amount-range", min=50)
    fresh = replay(root, session.policy, now=NOW)
    assert session.outcomes == fresh.by_outcome()
    assert session.outcomes is session.outcomes  # derived once per verdicts
    assert session.counts == {r["rule"]: {"failed": r["failed_records"],
                                          "rejected": r["rejected_records"],
                                          "rejected_batches": r["rejected_batches"]}
                              for r in fresh.rules.to_pylist()}
    status = session.status()
    assert status.startswith("local: ") and "re-judged after 1 edit of the policy" in status
    assert f"accepted {fresh.by_outcome()['accepted']:,}" in status


def test_suggestions_accepted_through_the_session(session):
    found = session.suggest()
    first = found.by_rate()[0]
    session.accept_suggestion(first.id)
    assert session.policy.rules[-1].id == first.id
    assert session.counts[first.id]["failed"] == first.rejected
    assert session.suggestions is found  # still the sample's suggestions
    with pytest.raises(EditError, match="nope"):
        session.accept_suggestion("nope")


def test_a_new_sample_replaces_suggestions_and_restarts_the_history_base(session, orders_dir):
    root, _ = orders_dir
    session.suggest()
    session.update_rule("amount-range", min=50)
    part = next(p for p in root.iterdir() if p.name.endswith("-1"))
    session.replay(Replayer(part, now=NOW))
    assert session.suggestions is None and session.previous is None
    assert session.edits_since_run == 0 and "in " in session.status()
    assert session.verdicts.by_outcome() == replay(part, session.policy, now=NOW).by_outcome()
    assert session.history  # the policy's history survives a new sample


def test_without_a_sample_the_policy_is_still_edited_and_checked(orders_dir):
    _, policy = orders_dir
    session = AuthoringSession(policy)
    assert session.verdicts is None and session.status() == "no sample loaded"
    assert session.update_rule("amount-range", min=5) is None
    assert session.policy.rule("amount-range").params["min"] == 5
    # the declared schema (the demo's registry) still checks fields as you type
    problem = session.check_expression("value.amuont > 0")
    assert problem is not None and "did you mean 'amount'" in problem.message
    with pytest.raises(SessionError, match="no sample"):
        session.replay()
    with pytest.raises(EditError, match="replay one locally"):
        session.suggest()


def test_a_spark_only_session_re_judges_edits_on_spark(orders_dir, monkeypatch):
    """Without a local sample the verdicts of an edit come from the engine that made the
    last ones (a stand-in engine here, recording what it was asked)."""
    import kqlab.spark

    root, policy = orders_dir
    asked = []

    def engine(source, pol, **kwargs):
        asked.append(pol)
        return replay(source, pol, now=NOW)

    monkeypatch.setattr(kqlab.spark, "replay_spark", engine)
    session = AuthoringSession(policy, now=NOW)
    session.replay(str(root), engine="spark", master="local[1]")
    assert session.replayer is None and session.run_info.engine == "spark"
    session.set_mode("traceparent", "observe")
    assert [p.rule("traceparent").mode for p in asked] == ["reject", "observe"]
    assert session.verdicts.by_outcome() == replay(root, session.policy, now=NOW).by_outcome()
    with pytest.raises(SessionError, match="engine must be one of"):
        session.replay(engine="flink")


def test_a_cancelled_replay_changes_nothing(session, orders_dir):
    root, _ = orders_dir
    before = (session.replayer, session.verdicts)

    class Stop(Exception):
        pass

    def step(phase, phases, text):
        if phase == 2:
            raise Stop(text)

    with pytest.raises(Stop, match="broker checks"):
        session.replay(root, step=step)
    assert (session.replayer, session.verdicts) == before
