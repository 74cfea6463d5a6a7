"""CEL rules as Arrow/numpy column kernels, with the per-record evaluator as the exact fallback.

A ``cel`` rule (or a ``when`` precondition) is first compiled by :mod:`kqlab.policy.cel` as
always (same compile errors).  This package then parses the expression with cel-python's lark
parser (``celpy.CELParser``; no grammar of our own) into a small tree and evaluates it over the
:class:`~kqlab.validate.context.EvalContext`'s cached columns with ``pyarrow.compute`` and
numpy.  The per-record evaluator stays the ground truth: every row the kernels cannot decide
with certainty — an evaluation error, an ambiguity in the decoded data, a value the engine
would hand to another engine — is *unsure* and evaluated per record by
:meth:`~kqlab.policy.cel.CelProgram.evaluate_many` on that row alone, so results and error
messages are exactly the per-record ones.  Anything outside the subset runs per record whole.

Supported subset (everything else falls back, transparently):

* literals: int, double, string, bytes, bool, ``null`` (values taken from cel-expr-python
  itself and cross-checked with celpy), list literals of literals (after ``in``);
* variables: ``value`` (the decoded value: an Arrow struct → CEL map, scalars as below),
  ``key`` (string; a non-UTF-8 key is bytes → that row per record), ``headers`` (``headers.x``,
  ``headers['x']``, ``'x' in headers``, ``has(headers.x)``), ``topic``, ``partition``,
  ``offset``, ``timestamp``, ``timestamp_type``, ``batch_offset``, ``batch_index``;
* field selection ``a.b`` / ``a['b']`` on struct columns, ``has(a.b)``, ``'b' in a``,
  list indexing with an int literal (``value.items[0]``);
* ``==`` ``!=`` (CEL's heterogeneous equality: across types false, ``1 == 1.0`` true, NaN
  unequal), ``<`` ``<=`` ``>`` ``>=`` on numbers (int/int exact, otherwise as double, as the
  C++ runtime does), strings (UTF-8 byte order), bytes and bools;
* ``+ - * / %`` on ints (overflow, ``/ 0`` and ``% 0`` are errors), ``+ - * /`` on doubles
  (IEEE), ``+`` on strings and bytes, unary ``-`` and ``!``;
* ``&&`` ``||`` with CEL's commutative error absorption (``false && <error>`` is false in either
  order), ``c ? a : b``;
* ``x in [literals]``, ``x in value.list``, ``size()`` (strings in code points, bytes, lists),
  ``s.startsWith(lit)``, ``endsWith``, ``contains``, ``s.matches(lit)`` (RE2, search),
  ``type(x) == int|uint|double|string|bytes|bool|map|list|null_type``, ``int()``, ``double()``.

Where the kernels defer to the record (the full mapping of Arrow types to CEL values is in
:mod:`kqlab.validate.cel.columns`):

* an integral float64 that may stand for a decoded Python ``int``, where int and double would
  differ (arithmetic, ``type()``, magnitudes ≥ 2**53);
* **absent vs null.**  For CEL, ``value.a`` on a missing key is an error and ``has(value.a)``
  is false, while a present null is null.  An Arrow struct cannot tell the two apart (see
  :mod:`kqlab.validate.fields`), so for a null child the kernels ask the decoded Python object
  of that row (the per-record path's own input), only for those rows.  Avro values decoded
  with a single writer schema (every record has every field) skip that check;
* values the per-record path hands to cel-python (a string with U+0000 anywhere in a
  referenced variable, a timestamp or time) are evaluated per record; so are Avro values
  whose schema needs a per-value converter (uuid, JSON-text unions), JSON values that fell back
  to text, and Arrow maps, decimals, dates and timestamps when selected.

Vectorising follows cel-expr-python's semantics; when the engine is cel-python
(``KQLAB_CEL_ENGINE``), rules run per record.

Modules, in the order an expression goes through them: :mod:`~kqlab.validate.cel.tree` (the
node types and the subset's vocabulary), :mod:`~kqlab.validate.cel.parse` (CEL text → tree),
:mod:`~kqlab.validate.cel.columns` (the sample's columns typed as CEL values),
:mod:`~kqlab.validate.cel.evaluate` (variables, selection, the per-record fallback),
:mod:`~kqlab.validate.cel.kernels` (operators and functions with CEL's error semantics) and
:mod:`~kqlab.validate.cel.masks` (row masks).
"""

from __future__ import annotations

from kqlab.validate.cel.evaluate import CelColumn, evaluate_cel
from kqlab.validate.cel.parse import parse_cel, vectorisable
from kqlab.validate.cel.tree import Unsupported

__all__ = ["CelColumn", "Unsupported", "evaluate_cel", "parse_cel", "vectorisable"]
