"""The kqlab-lab JupyterLab extension in a real browser (issue 20): policy files as documents
(kqlab's own load message as a marker, completion and hover docs from the policy's JSON
Schema, "Validate policy", "Replay on the sample…") and the
verdicts MIME renderer in a saved, executed notebook opened with no kernel.

The server is ``conftest.py``'s; its root holds a copy of the demo policy with one planted
error, the demo partition, and a notebook executed by a real kernel (nbclient) and saved; the
server allows no kernelspec, so no kernel runs while the page is open.  What the page must
show is computed here by kqlab (the loader's message, the replay's counts) and handed to
``e2e/tests/labextension.spec.mjs``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

import kqlab
from kqlab.policy import PolicyError
from kqlab.policy.schema import SCHEMA_FILE
from kqlab.sources.demo import demo_policy_path
from tests.browser.conftest import ARTIFACTS, jupyter_server, report, run_playwright
from tests.lab.verdicts_notebook import NOW, executed_verdicts_notebook

POLICY = "policies/orders.yaml"
#: the planted error: a rule kind one letter short (the fix types the letter back)
TYPO = ("kind: field_range", "kind: field_rang")


@pytest.fixture(scope="module")
def lab_ext(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict]]:
    home = tmp_path_factory.mktemp("labext")
    # no kernel can start on this server: what the page shows comes from the saved files
    with jupyter_server(home, {}, ("--KernelSpecManager.allowed_kernelspecs=kqlab-none",)) as url:
        root = home / "notebooks"
        nb_path = executed_verdicts_notebook(root)  # writes orders-0/ beside it
        nb = nbformat.read(nb_path, as_version=4)
        payload = nb.cells[-1].outputs[0].data["application/vnd.kqlab.verdicts+json"]

        text = demo_policy_path().read_text().replace(*TYPO, 1)
        (root / POLICY).parent.mkdir()
        (root / POLICY).write_text(text)
        with pytest.raises(PolicyError) as err:
            kqlab.loads_policy(text, source=POLICY)
        line_text = text.splitlines()[err.value.line - 1]
        fixed = kqlab.loads_policy(text.replace(TYPO[1], TYPO[0]), source=POLICY)
        replay = kqlab.replay(str(root / "orders-0"), fixed)  # the endpoint's clock: now
        expect = {
            "policy": POLICY, "message": str(err.value), "line_text": line_text.strip(),
            "marked": TYPO[1].split(": ")[1], "fixed_text": TYPO[0],
            "hover_word": "field_range", "hover_title": "rule kind field_range",
            "hover_doc": json.loads(SCHEMA_FILE.read_text())["$defs"]["rule.field_range"][
                "description"],
            "valid": f"{POLICY}: policy {fixed.name} is valid ({len(fixed.rules)} rules)",
            "sample": "orders-0", "replay_rules": replay.rules.num_rows,
            "replay_outcomes": replay.by_outcome(),
            "notebook": nb_path.name, "notebook_policy": payload["summary"]["policy"],
            "notebook_outcomes": payload["summary"]["outcomes"],
            "notebook_rules": [r["rule"] for r in payload["rules"]],
            "notebook_reasons": len(payload["reasons"]),
        }
        assert expect["notebook_outcomes"] == kqlab.replay(
            str(root / "orders-0"), kqlab.load_policy(demo_policy_path()), now=NOW).by_outcome()
        yield url, expect


def test_lab_extension(lab_ext: tuple[str, dict]) -> None:
    url, expect = lab_ext
    out = ARTIFACTS / "labextension"
    proc = run_playwright("labextension", url, out,
                          extra_env={"KQLAB_E2E_EXPECT": json.dumps(expect)})
    assert proc.returncode == 0, f"playwright failed (artifacts in {out}):\n{report(proc)}"
    assert "3 passed" in proc.stdout, report(proc)
    shots = sorted(p.name for p in Path(out).rglob("*.png"))
    assert shots == ["00-notebook7.png", "01-policy-marker.png", "01a-completion.png",
                     "01b-hover.png", "02-replay.png",
                     "03-saved-notebook.png"], shots


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_endpoints_answer_what_kqlab_says(lab_ext: tuple[str, dict]) -> None:
    """The server extension over HTTP: the loader's message for a bad policy, a sample path
    outside the root refused with a 400 saying so, a replay's payload equal to kqlab's."""
    url, expect = lab_ext
    bad = demo_policy_path().read_text().replace(*TYPO, 1)
    status, reply = _post(f"{url}/kqlab/policy/validate", {"path": POLICY, "text": bad})
    assert status == 200 and reply["ok"] is False
    assert reply["error"]["message"] == expect["message"]
    status, reply = _post(f"{url}/kqlab/policy/replay", {"path": POLICY, "sample": "../..",
                                                         "text": demo_policy_path().read_text()})
    assert status == 400 and "'../..' is outside the server's root folder" in reply["message"]
    status, reply = _post(f"{url}/kqlab/policy/replay", {
        "path": POLICY, "sample": "orders-0", "now": NOW, "text": demo_policy_path().read_text()})
    assert status == 200 and reply["ok"] is True
    assert reply["payload"]["summary"]["outcomes"] == expect["notebook_outcomes"]
