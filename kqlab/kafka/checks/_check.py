"""What one broker check is, as data: its spec step, error code, message template and the Kafka
code it mirrors.

A verdict names the check that made it (``step``) and the values the check saw (``params``);
the text a person reads is rendered from the check's template and those values, once, here.
Nothing downstream parses a message to learn which check fired or what it saw: the step and
the parameters travel beside the text (ARCHITECTURE.md, "identity is data").

The same template renders one message (:meth:`Check.render`, the byte-level validator) or a
whole Arrow column of them (:meth:`Check.render_array`, the vectorised table checks), so the two
engines cannot drift apart in wording.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kqlab.kafka.errors import KafkaError

#: where a check's text ends up (spec §5.2): the client's ``error_message``, one entry of
#: ``record_errors``, or only the broker's log (kqlab's ``detail``)
RETURNED = ("error_message", "record_error", "log")


@dataclass(frozen=True, slots=True)
class Check:
    """One step of the broker's validation procedure (``shared/spec/kafka-validation.md``).

    ``template`` uses ``str.format`` fields named like the check's ``params``; ``returned``
    says which response field carries the text; ``mirrors`` names the Kafka class and method
    whose behaviour the check reproduces, and ``condition`` says when it fires, in one line.
    """

    step: str
    section: str
    error: KafkaError
    template: str
    condition: str
    mirrors: str
    returned: str = "log"
    #: unique key of the check when several templates share a spec step (``"R4/type"``);
    #: defaults to ``step``, which is what verdicts report
    id: str = ""
    #: the parameter names the template reads, in order of appearance (derived)
    params: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        if self.returned not in RETURNED:
            raise ValueError(f"check {self.step}: returned must be one of {RETURNED}")
        names = tuple(dict.fromkeys(
            f for _, f, _, _ in string.Formatter().parse(self.template) if f))
        object.__setattr__(self, "params", names)
        if not self.id:
            object.__setattr__(self, "id", self.step)

    @property
    def code(self) -> int:
        """The Kafka error code the check answers."""
        return self.error.code

    @property
    def rule(self) -> str:
        """The id a record verdict's failure carries for this check (``broker:<step>``)."""
        return f"broker:{self.step}"

    def render(self, **params: object) -> str:
        """The check's text for one verdict (missing parameters raise ``KeyError``)."""
        return self.template.format(**params)

    def render_array(self, params: Mapping[str, object]) -> pa.Array:
        """The check's texts for many verdicts at once: each parameter is a scalar (the same
        in every row) or an array (numpy or Arrow) with one value per row."""
        n = None
        for v in params.values():
            if isinstance(v, np.ndarray | pa.Array | pa.ChunkedArray):
                n = len(v)
                break
        if n is None:
            return pa.array([self.render(**params)], pa.string())
        parts: list[object] = []
        for literal, name, _, _ in string.Formatter().parse(self.template):
            if literal:
                parts.append(literal)
            if name:
                parts.append(_as_strings(params[name]))
        if not self.params:  # a template without fields
            return pa.repeat(pa.scalar(self.template, pa.string()), n)
        if len(parts) == 1:  # the template is one field: the values themselves
            only = parts[0]
            return only.combine_chunks() if isinstance(only, pa.ChunkedArray) else only
        parts.append("")  # the separator binary_join_element_wise takes last
        out = pc.binary_join_element_wise(*parts)
        return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _as_strings(value: object) -> object:
    """A parameter as ``binary_join_element_wise`` takes it: str scalars stay, arrays become
    string arrays (numbers print like Java's ``Long.toString``)."""
    if isinstance(value, np.ndarray):
        return pa.array(value).cast(pa.string())
    if isinstance(value, pa.Array | pa.ChunkedArray):
        return value if value.type == pa.string() else value.cast(pa.string())
    return str(value)


class Registry:
    """Every check by id, in spec order (the docs table and the tests iterate it)."""

    def __init__(self) -> None:
        self._by_step: dict[str, Check] = {}

    def add(self, check: Check) -> Check:
        if check.id in self._by_step:
            raise ValueError(f"check {check.id} is defined twice")
        self._by_step[check.id] = check
        return check

    def __getitem__(self, check_id: str) -> Check:
        try:
            return self._by_step[check_id]
        except KeyError:
            raise KeyError(f"no broker check {check_id!r}; known: {', '.join(self._by_step)}"
                           ) from None

    def __contains__(self, step: object) -> bool:
        return step in self._by_step

    def __iter__(self) -> Iterator[Check]:
        """Checks in spec order: by section, then in the order each module defines them."""
        return iter(sorted(self._by_step.values(), key=lambda c: c.section))

    def __len__(self) -> int:
        return len(self._by_step)


CHECKS = Registry()


#: one group of verdicts decided by the same check: their rows and the check's parameters
#: (each a scalar, the same for every row, or an array with one value per row)
ParamsPart = tuple[np.ndarray, Mapping[str, object]]


def params_column(n: int, parts: list[ParamsPart]) -> pa.MapArray:
    """The ``params`` column (``map<string, string>``) of ``n`` verdict rows from the groups
    that were decided (rows in no group are null); built without a per-row Python loop."""
    counts = np.zeros(n, dtype=np.int64)
    keys: list[pa.Array] = []
    items: list[pa.Array] = []
    order_keys: list[np.ndarray] = []
    for rows, params in parts:
        k = len(params)
        if not len(rows):
            continue
        counts[rows] = k
        if not k:
            continue
        m = len(rows)
        names = list(params)
        keys.append(pa.array(np.tile(np.asarray(names, dtype=object), m), pa.string()))
        cols = []
        for name in names:
            v = params[name]
            if isinstance(v, np.ndarray | pa.Array | pa.ChunkedArray):
                cols.append(_as_strings(v))
            else:
                cols.append(pa.repeat(pa.scalar(str(v), pa.string()), m))
        # row-major: row 0's k values, then row 1's ...
        stacked = pa.concat_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray)
                                    else c for c in cols])
        pos = (np.arange(k)[None, :] * m + np.arange(m)[:, None]).ravel()
        items.append(stacked.take(pa.array(pos)))
        order_keys.append(np.repeat(rows.astype(np.int64), k) * 1024 + np.tile(np.arange(k), m))
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    if keys:
        order = np.argsort(np.concatenate(order_keys), kind="stable")
        key_arr = pa.concat_arrays(keys).take(pa.array(order))
        item_arr = pa.concat_arrays(items).take(pa.array(order))
    else:
        key_arr = item_arr = pa.array([], pa.string())
    decided = np.zeros(n, dtype=bool)
    for rows, _ in parts:
        decided[rows] = True
    return pa.MapArray.from_arrays(pa.array(offsets), key_arr, item_arr,
                                   mask=pa.array(~decided))
