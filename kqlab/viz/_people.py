"""Values as people read them: the record detail and the explorer's table show keys, values
and messages through these functions, never through ``repr`` or ``str`` of the Python object.

* floats: the shortest text that reads back as the same number — for a 32-bit float
  (Avro ``float``, Arrow ``float32``) the shortest that reads back as that float32, so 0.3
  stays ``0.3`` and not ``0.30000001192092896``; a double whose shortest form needs 16 or 17
  digits only because of arithmetic noise (``0.1 + 0.2``) is shown with 15, which is within
  two units in the last place of it (the exact value is in the raw bytes and the verdict);
* decimals as decimals (``12.30``, never ``Decimal('12.30')`` nor an exponent);
* bytes as escaped text when they are mostly printable (``b"ab\\x00"``), as hex otherwise,
  never decoded into replacement characters; cut after :data:`BYTES_SHOWN` bytes;
* times as ISO 8601; ``null``, ``true``/``false`` as in JSON;
* errors as one line: the message, not the exception's class path or a traceback.

Nothing here changes data: verdicts and :class:`~kqlab.viz.RecordDetail`'s ``to_dict`` keep
the exact values; these are the texts drawn for them.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import re
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["BYTES_SHOWN", "error_line", "number", "render", "text", "tidy"]

#: bytes shown of a bytes value before it is cut (a detail is for reading, not copying)
BYTES_SHOWN = 64
_SIGNIFICANT = re.compile(r"[1-9]\d*")
_FLOAT_IN_TEXT = re.compile(r"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")


def number(x: float, *, single: bool = False) -> str:
    """A float for people (see the module doc); ``single``: it was a 32-bit float.

    Examples
    --------
    >>> number(0.1 + 0.2), number(-24.610000000000003), number(0.30000001192092896, single=True)
    ('0.3', '-24.61', '0.3')
    >>> number(1e-7), number(2.5), number(float("nan"))
    ('1e-07', '2.5', 'NaN')
    """
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if single:  # the shortest digits that read back as this float32, laid out like repr
        f = np.float32(x)
        if f != 0 and not 1e-4 <= abs(f) < 1e16:
            return np.format_float_scientific(f, unique=True, trim="-", exp_digits=2)
        return np.format_float_positional(f, unique=True, trim="0")
    shortest = repr(x)
    mantissa = shortest.split("e")[0].replace("-", "").replace(".", "")
    digits = _SIGNIFICANT.search(mantissa)
    if digits is None or len(digits.group().rstrip("0")) < 16:
        return shortest
    short = f"{x:.15g}"
    if abs(float(short) - x) <= 2 * math.ulp(x):
        return short
    return shortest


def _bytes(data: bytes) -> str:
    cut = data[:BYTES_SHOWN]
    more = f" … ({len(data):,} bytes)" if len(data) > BYTES_SHOWN else ""
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in cut)
    if cut and printable >= 0.75 * len(cut):
        body = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else
                       {9: "\\t", 10: "\\n", 13: "\\r", 34: '\\"', 92: "\\\\"}.get(b, f"\\x{b:02x}")
                       for b in cut)
        return f'b"{body}"{more}'
    return "hex " + cut.hex(" ") + more if cut else 'b""'


def text(value: Any, arrow_type: pa.DataType | None = None) -> str:
    """One value (a leaf or a whole structure) as one line of text."""
    return render(value, arrow_type, indent=None)


def render(value: Any, arrow_type: pa.DataType | None = None, *, indent: int | None = 2
           ) -> str:
    """``value`` as JSON-like text for people (``indent=None``: one line); ``arrow_type``, the
    Arrow type the value was read as, tells a 32-bit float from a double.

    Examples
    --------
    >>> import decimal
    >>> print(render({"amount": decimal.Decimal("12.30"), "raw": b"\\x00\\x01\\xfe",
    ...               "ratio": 0.1 + 0.2}, indent=None))
    {"amount": 12.30, "raw": hex 00 01 fe, "ratio": 0.3}
    """
    return _render(value, arrow_type, indent, 0)


def _child(arrow_type: pa.DataType | None, key: Any) -> pa.DataType | None:
    if arrow_type is None:
        return None
    if pa.types.is_struct(arrow_type):
        i = arrow_type.get_field_index(str(key))
        return arrow_type.field(i).type if i >= 0 else None
    if pa.types.is_map(arrow_type):
        return arrow_type.item_type
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or \
            pa.types.is_fixed_size_list(arrow_type):
        return arrow_type.value_type
    return None


def _render(value: Any, arrow_type: pa.DataType | None, indent: int | None, depth: int) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return number(value, single=arrow_type is not None and pa.types.is_float32(arrow_type))
    if isinstance(value, np.floating):
        return number(float(value), single=value.dtype == np.float32)
    if isinstance(value, np.integer):
        return str(int(value))
    if isinstance(value, decimal.Decimal):
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _bytes(bytes(value))
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return _duration(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping) or (isinstance(value, list) and arrow_type is not None
                                      and pa.types.is_map(arrow_type)):
        items = list(value.items()) if isinstance(value, Mapping) else \
            [(k, v) for k, v in value]
        parts = [f"{json.dumps(str(k), ensure_ascii=False)}: "
                 f"{_render(v, _child(arrow_type, k), indent, depth + 1)}" for k, v in items]
        return _join(parts, "{", "}", indent, depth)
    if isinstance(value, list | tuple):
        parts = [_render(v, _child(arrow_type, i), indent, depth + 1) for i, v in enumerate(value)]
        return _join(parts, "[", "]", indent, depth)
    return json.dumps(str(value), ensure_ascii=False)


def _duration(value: datetime.timedelta) -> str:
    """A duration as protobuf's JSON mapping writes one (``"90.000000005s"``), not pandas'
    ``0 days 00:01:30.000000005``; nanoseconds kept when the value has them (a pandas
    Timedelta, which is what Arrow's ``duration[ns]`` reads as).

    >>> import datetime
    >>> _duration(datetime.timedelta(minutes=-1, microseconds=-500))
    '-60.0005s'
    """
    ns = getattr(value, "value", None)  # pandas.Timedelta: whole nanoseconds
    if not isinstance(ns, int):
        ns = ((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds) * 1_000
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    whole, frac = divmod(ns, 1_000_000_000)
    return f"{sign}{whole}.{frac:09d}".rstrip("0").rstrip(".") + "s"


def _join(parts: list[str], open_: str, close: str, indent: int | None, depth: int) -> str:
    if not parts:
        return open_ + close
    if indent is None:
        return open_ + ", ".join(parts) + close
    pad = " " * (indent * (depth + 1))
    return open_ + "\n" + ",\n".join(pad + p for p in parts) + "\n" + \
        " " * (indent * depth) + close


def tidy(message: str | None) -> str | None:
    """``message`` with float noise trimmed from the numbers it quotes (``got
    -24.610000000000003`` reads ``got -24.61``); for display only.

    >>> tidy("amount must be within [0.01, 100000], got -24.610000000000003")
    'amount must be within [0.01, 100000], got -24.61'
    """
    if not message:
        return message
    return _FLOAT_IN_TEXT.sub(lambda m: number(float(m.group())), message)


def error_line(error: BaseException | str | None, limit: int = 300) -> str | None:
    """An error as one line for people: the exception's own message (its class name only
    when it has none), the last line of a traceback, cut at ``limit`` characters.

    >>> error_line(ValueError("bad\\nsecond line"))
    'bad'
    >>> error_line("Traceback (most recent call last):\\n  File ...\\nKeyError: 'x'")
    "KeyError: 'x'"
    """
    if error is None:
        return None
    if isinstance(error, BaseException):
        lines = [x.strip() for x in str(error).strip().splitlines() if x.strip()]
        line = lines[0] if lines else re.sub(r"(?<!^)(?=[A-Z])", " ",
                                             type(error).__name__).lower()
        if isinstance(error, KeyError) and lines:
            line = f"missing {line}"
    else:
        lines = [x.strip() for x in error.strip().splitlines() if x.strip()]
        if not lines:
            return ""
        line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"
