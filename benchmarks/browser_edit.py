"""A rule edit made in the page, to every count and figure updated in the page: JupyterLab in
Debian chromium (Playwright), the Workbench's views on a decoded 1M-record sample.

What is timed is what the analyst waits for.  The page runs a notebook (written to a
temporary folder) that builds the Avro orders sample of ``benchmarks/edit.py`` in its kernel,
opens a :class:`kqlab.Workbench` on it with the six-rule policy, and shows the workbench's own
views all at once, none hidden in a tab (the worst case): the replay panel's status line, the
policy editor (rule counts, outcomes, its policy-impact figure), the three workbench figures
(rejections by reason, by partition and offset, over time) and the rejection explorer's
table.  ``benchmarks/_browser_edit.mjs`` then makes the edits with the mouse, cycling through
five kinds: the ``currency`` rule's mode toggle to observe and back to reject, a new upper
bound of ``amount`` typed into the rule form and applied (the Apply click is the input; the
typing is not timed), the ``valid-order`` rule's trash button, and Undo.

* **page** latency, per edit, measured in the page: from the input event's timestamp (the
  ``pointerdown`` of the click) to the last of the changes it causes — a rule count, the
  outcome or status line or the explorer's table changing (a ``MutationObserver``) and every
  figure's redraw (plotly's ``plotly_afterplot``), once the kernel is idle and the page quiet.
  After each edit, untimed, every figure drawn is compared with the kernel's figure and the
  rule rows shown (visible ones: a removed rule's row stays in the page, hidden) with the
  kernel's rules, in order, each count with the kernel's count: a missed update fails the
  run instead of shortening it.  ``rule_rows_rendered`` (per kind) counts the rule row views
  the page created for an edit (a row's count element not in the page before).
* **kernel** latency, per edit, in the same kernel once the page is done: an
  :class:`~kqlab.authoring.AuthoringSession` without views on the same sample (the
  workbench's warm :class:`~kqlab.validate.Replayer`) makes the same kinds of edits, each
  timed from the call to its new verdicts.

The profile of the page's edits is printed too: when the first change reached the page, the
kernel's share (the session's re-judging and the views' refresh, timed in the kernel around
``AuthoringSession._judged`` / ``_publish``), counts, table and figure redraws.

The last line is one JSON object: ``page_p95_ms`` and ``kernel_p95_ms`` (and medians, the
kernel's CPU time per edit — ``kernel_cpu_*``, and in the profile the CPU of the page edits'
re-judging and views — the profile, ``goal_met``: page p95 ≤ 300 ms and kernel p95 ≤ 150
ms).  ``--quick`` uses 100k
records and 10 edits (under 60 s); the default is 1M records and 25 edits.  Needs chromium and
``e2e/``'s npm packages (``make setup-browser``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.edit import percentile

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "e2e"
DRIVER = Path(__file__).with_name("_browser_edit.mjs")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
PAGE_GOAL_MS, KERNEL_GOAL_MS = 300, 150

#: the notebook the page runs: the sample, the workbench's views, timers in the kernel
NOTEBOOK_CELLS = [
    '''import gc
import time

import ipywidgets as w

import kqlab
from benchmarks.cel import NOW, make_values, register
from benchmarks.edit import POLICY, make_sample
from kqlab.authoring import AuthoringSession
from kqlab.policy import loads_policy

N = {records}
sample = make_sample(make_values(N, register()))
policy = loads_policy(POLICY)
wb = kqlab.Workbench(sample, policy, now=NOW)
session = wb.session
gc.collect()

# the kernel's share of each page edit: re-judging (verdicts) and the views' refresh
TIMES = []

def _timed(name, fn):
    def timed(*args, **kwargs):
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES.append((name, (time.perf_counter() - t) * 1000,
                          (time.process_time() - c) * 1000))
    return timed

session._judged = _timed("judge", session._judged)
session._publish = _timed("views", session._publish)

def kernel_edits(count):
    """The same kinds of edits on a session without views (the workbench's warm sample)."""
    s = AuthoringSession(policy, session.replayer, now=NOW)
    out = {"wall": [], "cpu": []}  # ms per edit: elapsed, and the kernel process's CPU
    for i in range(count):
        kind = i % 5
        t, c = time.perf_counter(), time.process_time()
        if kind == 0:
            s.set_mode("currency", "observe")
        elif kind == 1:
            s.set_mode("currency", "reject")
        elif kind == 2:
            s.update_rule("amount", max=4000 - 7 * i)
        elif kind == 3:
            s.remove_rule("valid-order")
        else:
            s.undo()
        out["wall"].append((time.perf_counter() - t) * 1000)
        out["cpu"].append((time.process_time() - c) * 1000)
    return out

def _fingerprint(fig):
    out = []
    for t in fig.data:
        x = [] if t.x is None else list(t.x)
        total = 0.0
        for v in x:
            try:
                f = float(v)
            except (TypeError, ValueError):
                continue
            if f == f:
                total += f
        out.append([t.name, len(x), total, 0 if t.y is None else len(t.y)])
    return out

def _state():
    """What the page must show: each figure's traces, each rule's failed count (in policy
    order), one row per rule."""
    import json
    counts = session.counts
    return json.dumps({
        "figures": [[_fingerprint(f) for f in wb.editor.figures.values()]] + (
            [[_fingerprint(f) for f in wb.figures.values()]] if LAYOUT == "all" else []),
        "counts": {r.id: counts.get(r.id, {"failed": 0})["failed"]
                   for r in session.policy.rules},
        "rows": len(session.policy.rules)})

LAYOUT = "{layout}"
if LAYOUT == "all":  # every view of the workbench at once, none in a hidden tab, so the
    # explorer and the figures follow every edit (reading them brings them up to date)
    session.observe(lambda change: (wb.explorer, wb.figures))
    view = w.VBox([wb.panel.widget, wb.editor.widget, wb.figures_out, wb.explorer.widget])
else:  # the Workbench as it is shown, on its Policy tab, where rules are edited
    view = wb
view''',
    'print("bench ready:", N, "records", session.outcomes)',
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(records: int, layout: str) -> dict:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
              "outputs": [],
              "source": src.replace("{records}", str(records)).replace("{layout}", layout)}
             for i, src in enumerate(NOTEBOOK_CELLS)]
    return {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                        "language": "python"}}}


def _start_lab(home: Path, port: int) -> subprocess.Popen[bytes]:
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTER_DATA_DIR": str(home / "data"),
           "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1",
           "--port", str(port), "--allow-root", "--ServerApp.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={home / 'nb'}",
           "--LabApp.expose_app_in_browser=True",
           "--FileContentsManager.delete_to_trash=False"]
    log = (home / "lab.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2):
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc)
                raise SystemExit("JupyterLab did not start:\n"
                                 + (home / "lab.log").read_text()[-3000:]) from None
            time.sleep(0.25)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server shuts its kernel down), then SIGKILL the process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(xs), 1), "p95_ms": round(percentile(xs, 0.95), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100k records, 10 edits (< 60 s)")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--edits", type=int, default=None)
    ap.add_argument("--layout", choices=("workbench", "all"), default="workbench",
                    help="the Workbench on its Policy tab (default), or all of its views at "
                         "once outside the tabs (the worst case)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")
    args = ap.parse_args()
    n = args.records or (100_000 if args.quick else 1_000_000)
    count = args.edits or (10 if args.quick else 25)
    if not os.access(CHROMIUM, os.X_OK) or not (E2E / "node_modules" / "playwright-core").is_dir():
        raise SystemExit("browser_edit needs chromium and e2e/'s npm packages: "
                         "make setup-browser")

    t0 = time.perf_counter()
    home = Path(tempfile.mkdtemp(prefix="kqlab-bench-browser-"))
    (home / "nb").mkdir()
    (home / "nb" / "bench.ipynb").write_text(json.dumps(_notebook(n, args.layout)))
    result_path = home / "result.json"
    port = _free_port()
    proc = _start_lab(home, port)
    try:
        env = {**os.environ, "LAB_URL": f"http://127.0.0.1:{port}", "NOTEBOOK": "bench.ipynb",
               "EDITS": str(count), "RESULT": str(result_path), "CHROMIUM": CHROMIUM,
               "E2E_DIR": str(E2E), "SHOTS": str(home)}
        run = subprocess.run(["node", str(DRIVER)], cwd=E2E, env=env, timeout=1800,
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"the page driver failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}")
        sys.stderr.write(run.stderr)
    finally:
        _stop(proc)
    res = json.loads(result_path.read_text())
    if not args.keep:
        shutil.rmtree(home, ignore_errors=True)

    edits = res["edits"]
    page = [e["page_ms"] for e in edits]
    kernel, kernel_cpu = res["kernel_ms"]["wall"], res["kernel_ms"]["cpu"]
    judge = [t for name, t, _ in res["kernel_times"] if name == "judge"]
    views = [t for name, t, _ in res["kernel_times"] if name == "views"]
    judge_cpu = [c for name, _, c in res["kernel_times"] if name == "judge"]
    views_cpu = [c for name, _, c in res["kernel_times"] if name == "views"]
    profile = {
        "first_change_in_page": _stats([e["first_ms"] for e in edits]),
        "counts": _stats([e["counts_ms"] for e in edits]),
        "table": _stats([e["table_ms"] for e in edits if e["table_ms"] is not None] or [0.0]),
        "figures_last_redraw": _stats([e["figures_ms"] for e in edits]),
        "plotly_react_start": _stats([e["react_start_ms"] for e in edits
                                      if e["react_start_ms"] is not None] or [0.0]),
        "plotly_react_total": _stats([e["react_ms"] for e in edits]),
        "figure_redraws_per_edit": round(statistics.mean(e["redraws"] for e in edits), 1),
        "hidden_views_last_change": _stats([e["hidden_ms"] for e in edits
                                            if e["hidden_ms"] is not None] or [0.0]),
        "in_kernel_judge": _stats(judge), "in_kernel_views": _stats(views),
        "in_kernel_judge_cpu": _stats(judge_cpu), "in_kernel_views_cpu": _stats(views_cpu),
    }
    by_kind: dict[str, dict[str, float]] = {}
    for kind in dict.fromkeys(e["kind"] for e in edits):
        mine = [e["page_ms"] for e in edits if e["kind"] == kind]
        rows = [e["rows_rendered"] for e in edits if e["kind"] == kind]
        by_kind[kind] = {"edits": len(mine), **_stats(mine),
                         "rule_rows_rendered": round(statistics.mean(rows), 1)}
    page_p95, kernel_p95 = percentile(page, 0.95), percentile(kernel, 0.95)
    out = {
        "benchmark": "browser_edit", "records": n, "edits": len(page), "layout": args.layout,
        "page_median_ms": round(statistics.median(page), 1), "page_p95_ms": round(page_p95, 1),
        "kernel_median_ms": round(statistics.median(kernel), 1),
        "kernel_p95_ms": round(kernel_p95, 1),
        "kernel_cpu_median_ms": round(statistics.median(kernel_cpu), 1),
        "kernel_cpu_p95_ms": round(percentile(kernel_cpu, 0.95), 1),
        "goal_page_p95_ms": PAGE_GOAL_MS, "goal_kernel_p95_ms": KERNEL_GOAL_MS,
        "goal_met": page_p95 <= PAGE_GOAL_MS and kernel_p95 <= KERNEL_GOAL_MS,
        "profile": profile, "by_kind": by_kind,
        "load": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(f"{n:,} records; page ready in {res['ready_s']:.1f} s; {len(page)} edits in the page")
    for kind, s in by_kind.items():
        print(f"  {kind:14s} {s['edits']} edits: page median {s['median_ms']} ms, "
              f"p95 {s['p95_ms']} ms; {s['rule_rows_rendered']} rule rows rendered an edit")
    print(f"page: median {out['page_median_ms']} ms, p95 {out['page_p95_ms']} ms "
          f"(goal <= {PAGE_GOAL_MS}); kernel: median {out['kernel_median_ms']} ms, "
          f"p95 {out['kernel_p95_ms']} ms (goal <= {KERNEL_GOAL_MS})")
    print("profile (ms from the input event; in-kernel times per call): "
          + "; ".join(f"{k} {v}" for k, v in profile.items()))
    if os.environ.get("KQLAB_BENCH_TRAIL"):  # the last changes of each edit, for profiling
        for e in edits:
            print("  ", e["kind"], round(e["page_ms"]), e["trail"], file=sys.stderr)
    print(orjson.dumps(out).decode())


if __name__ == "__main__":
    main()
