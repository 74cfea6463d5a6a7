"""The baseline a ``drift`` or ``schema_drift`` check compares with: a saved snapshot or a
log directory, its path relative to the policy file.

It is read once per replay, before the pass (a streamed replay's chunks all compare with the
same baseline), decoded with the policy's formats, and reduced to what the check needs: for
a numeric field the bin edges (the baseline's quantiles) and its counts per bin; for any
other field its counts per category; for schema drift its record shapes.  The baseline's
partial is computed by the very function that computes the sample's
(:func:`~kqlab.validate.sample_checks.compute.partial_of`), so both are binned alike.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from kqlab.errors import KqlabError
from kqlab.policy.model import Check, Policy
from kqlab.validate.sample_checks.compute import BaselinePlan

__all__ = ["MAX_CACHED_PLANS", "BaselinePlan", "baseline_path", "baseline_plan",
           "clear_baseline_cache"]


def baseline_path(check: Check, base_dir: Path | None) -> Path:
    """Where the check's baseline is: its ``baseline`` as written, relative to ``base_dir``
    (the policy file's folder; the working directory when None)."""
    raw = Path(str(check.param("baseline")))
    if raw.is_absolute() or base_dir is None:
        return raw
    return base_dir / raw


#: plans made from baselines, by what they depend on (:func:`_plan_key`), newest last
_PLANS: OrderedDict[bytes, BaselinePlan] = OrderedDict()
#: replays on several threads (a notebook's, a server's) share the plans
_PLANS_LOCK = threading.Lock()
#: at most this many are kept (each holds a baseline's bins or categories, not its records)
MAX_CACHED_PLANS = 16


def _files_state(path: Path) -> list[tuple[str, int, int, int]]:
    """What identifies a baseline's content without reading it: each file's relative path,
    size, modification time (ns) and inode (a file rewritten or replaced changes one)."""
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file())
    out = []
    for f in files:
        st = f.stat()
        out.append((str(f.relative_to(path)) if f != path else "", st.st_size,
                    st.st_mtime_ns, st.st_ino))
    return out


def _plan_key(check: Check, policy: Policy, path: Path, now: int) -> bytes:
    """A plan depends on the baseline's files, the check (kind, field, bins, ``when``) and
    the policy's key/value formats; on ``now`` only through a ``when`` expression."""
    import orjson

    return orjson.dumps([str(path.resolve()), _files_state(path), check.kind,
                         check.param("field"), check.param("bins"), check.when,
                         now if check.when else None, repr(policy.key), repr(policy.value)])


def clear_baseline_cache() -> None:
    """Forget every plan made (the next replay reads its baselines again)."""
    with _PLANS_LOCK:
        _PLANS.clear()


def baseline_plan(check: Check, policy: Policy, base_dir: Path | None, now: int,
                  resolver: object = None, loaded: dict[str, object] | None = None
                  ) -> BaselinePlan:
    """Read ``check``'s baseline and reduce it (see the module doc); problems become a
    not-evaluable reason, never an exception: a replay always reports its checks.
    ``loaded``: baselines already read and decoded, by path (a drift and a schema-drift
    check on one baseline read it once).

    A plan made is kept for the process (at most :data:`MAX_CACHED_PLANS`): replaying again
    against an unchanged baseline (a notebook's next replay, the workbench's) does not
    read and decode it again.  Kept by the baseline files' sizes, times and inodes, so a
    baseline rewritten is read anew; not kept when a schema resolver is given (what it
    resolves may change without the files changing)."""
    path = baseline_path(check, base_dir)
    if resolver is not None or not path.exists():
        return _baseline_plan(check, policy, base_dir, now, resolver, loaded)
    try:
        key = _plan_key(check, policy, path, now)
    except OSError:  # a file gone while listing: read it (and report what reading finds)
        return _baseline_plan(check, policy, base_dir, now, resolver, loaded)
    with _PLANS_LOCK:
        plan = _PLANS.get(key)
        if plan is not None:
            _PLANS.move_to_end(key)
            return plan
    plan = _baseline_plan(check, policy, base_dir, now, resolver, loaded)
    if plan.reason in (None, "baseline_empty"):
        with _PLANS_LOCK:
            _PLANS[key] = plan
            while len(_PLANS) > MAX_CACHED_PLANS:
                _PLANS.popitem(last=False)
    return plan


def _baseline_plan(check: Check, policy: Policy, base_dir: Path | None, now: int,
                   resolver: object = None, loaded: dict[str, object] | None = None
                   ) -> BaselinePlan:
    """:func:`baseline_plan`, read from the files."""
    from kqlab.validate.context import EvalContext
    from kqlab.validate.sample import record_batch_rows
    from kqlab.validate.sample_checks.columns import field_values, numeric_values
    from kqlab.validate.sample_checks.compute import Chunk, partial_of

    path = baseline_path(check, base_dir)
    if not path.exists():
        return BaselinePlan(str(path), reason="baseline_missing")
    try:
        chunk = loaded.get(str(path)) if loaded is not None else None
        if chunk is None:
            from kqlab.validate.loading import load_sample

            sample = load_sample(path)
            if resolver is None and policy.value.schemas is not None:
                from kqlab.serde.schemas import SchemaResolver

                resolver = SchemaResolver.from_source(policy.value.schemas)
            ctx = EvalContext(sample.records, now, sample.batches, value_format=policy.value,
                              key_format=policy.key, resolver=resolver)  # type: ignore[arg-type]
            rows = record_batch_rows(sample.records, sample.batches)
            control = sample.batches.column("is_control").to_numpy(zero_copy_only=False)
            control = control.astype(bool)[rows] if len(rows) else np.zeros(0, bool)
            chunk = Chunk(ctx, control)
            if loaded is not None:
                loaded[str(path)] = chunk
        assert isinstance(chunk, Chunk)
        ctx, control = chunk.ctx, chunk.control
        edges = None
        if check.kind == "drift":
            fv = field_values(ctx, str(check.param("field")))
            if fv.values is not None:
                valid, numbers, non_numeric = numeric_values(fv)
                keep = valid & ~control
                if keep.any() and non_numeric == 0:
                    bins = int(check.param("bins") or 10)
                    qs = np.quantile(numbers[keep], np.linspace(0, 1, bins + 1)[1:-1])
                    edges = np.unique(qs)
        plan = BaselinePlan(str(path), edges=edges)
        partial = partial_of(check, chunk, plan)
    except (KqlabError, OSError, ValueError) as exc:
        return BaselinePlan(str(path), reason="baseline_unreadable", detail=str(exc))
    if not partial.table.num_rows:
        return BaselinePlan(str(path), edges=edges, partial=partial,
                            records=partial.counts.get("records", 0), reason="baseline_empty")
    return BaselinePlan(str(path), edges=edges, partial=partial,
                        records=partial.counts.get("records", 0))
