"""Which regular expressions a policy may hold: the one check every pattern-taking rule calls.

A rule's pattern runs in more than one engine.  ``field_regex`` and CEL's ``matches()`` run on
RE2 (Arrow's ``match_substring_regex``, the C++ CEL runtime), and so do the enforcement targets
the policy is exported to (Confluent's CEL rules, Tansu's JSON Schema ``pattern`` aside); the
local engine matches ``header_pattern`` with Python's :mod:`re`.  A pattern is only portable when
*both* dialects read it, so :func:`pattern_problem` asks both — RE2 first (google-re2, which
cel-python depends on, else Arrow's RE2), then Python — and refuses what either refuses, at load
time.  For the constructs people bring from PCRE or Python (look-around, backreferences,
possessive quantifiers, atomic groups, ``\\Z`` ...) it names the construct, points at it and says
what to write instead, instead of echoing the engine's terse message.

Before this module, the loader only asked Python's ``re`` (so ``header_pattern`` accepted
look-ahead that ``field_regex`` then refused at replay time): now every kind calls this one
function (:meth:`kqlab.policy.rule_checks.RuleChecker.param` for ``pattern`` parameters, and
:mod:`kqlab.policy.expression_checks` for literal ``matches()`` arguments).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["PatternProblem", "pattern_problem"]

_BREAKS = "\r\n"


@dataclass(frozen=True, slots=True)
class PatternProblem:
    """Why a pattern is refused: ``message`` (what and what to write instead) and ``offset``,
    the 0-based index in the pattern of the offending construct (None when no engine says)."""

    message: str
    offset: int | None


#: group openers RE2 does not have: (opener, what it is, what to do instead)
_GROUPS = (
    ("(?<=", "a look-behind", "RE2 has no look-around: match the text itself, or check the "
     "context with a second rule"),
    ("(?<!", "a negative look-behind", "RE2 has no look-around: match the text itself, or "
     "check the context with a second rule (a CEL !matches(...))"),
    ("(?=", "a look-ahead", "RE2 has no look-around: match the text itself, or check the "
     "context with a second rule"),
    ("(?!", "a negative look-ahead", "RE2 has no look-around: write the allowed text "
     "explicitly, or refuse the other with a second rule (a CEL !matches(...))"),
    ("(?>", "an atomic group", "RE2 never backtracks, so a plain group is already atomic: "
     "write (?:...)"),
    ("(?P=", "a named backreference", "RE2 has no backreferences: spell out the alternatives"),
    ("(?(", "a conditional group", "RE2 has no conditionals: write the alternatives with |"),
    ("(?#", "a comment group", "RE2 has no comment groups: remove it"),
)
#: inline flags RE2 knows (``(?i)``, ``(?-s:...)``); Python's a, L, u, x are not among them
_RE2_FLAGS = frozenset("imsU-")


def pattern_problem(pattern: str) -> PatternProblem | None:
    """None when RE2 and Python's ``re`` both read ``pattern``; else why not, and where.

    Examples
    --------
    >>> pattern_problem("^[A-Z]{3}-[0-9]{4}$") is None
    True
    >>> problem = pattern_problem("^(?!test-).*")
    >>> problem.offset, problem.message.split(" — ")[0]
    (1, "'(?!' is a negative look-ahead, which RE2 cannot run")
    """
    construct = _known_construct(pattern)
    if construct is not None:
        return construct
    why = _re2_error(pattern)
    if why is not None:
        return PatternProblem(f"RE2 refuses it ({why}) — fix the pattern; RE2 is what "
                              "field_regex, CEL matches() and the export targets run",
                              _locate(pattern, why))
    try:
        re.compile(pattern)
    except re.error as exc:
        return PatternProblem(f"Python's re refuses it ({exc.msg}) — kqlab also matches "
                              "patterns with Python's re (header_pattern): use syntax both "
                              "read", exc.pos)
    return None


def _known_construct(pattern: str) -> PatternProblem | None:
    """The first PCRE/Python-only construct in ``pattern``, named, with a fix."""
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if not in_class and nxt in "123456789":
                return _problem(pattern, i, 2, "a backreference", "RE2 has no "
                                "backreferences: spell out the alternatives")
            if not in_class and nxt == "k" and i + 2 < n and pattern[i + 2] in "<{'":
                return _problem(pattern, i, 2, "a named backreference", "RE2 has no "
                                "backreferences: spell out the alternatives")
            if nxt == "Z":
                return _problem(pattern, i, 2, "Python's end-of-text anchor", "write $ (in "
                                "RE2, the end of the text unless (?m) is set)")
            if nxt == "z":
                return _problem(pattern, i, 2, "RE2's end-of-text anchor", "write $ (Python's "
                                "re, which matches header_pattern, has no \\z)",
                                who="Python's re cannot read")
            if nxt == "G":
                return _problem(pattern, i, 2, "PCRE's match-start anchor", "anchor with ^")
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "[":
            in_class = True
            # a ']' (or '^]') right after '[' is a literal member, not the end of the class
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            continue
        if c == "(" and pattern.startswith("(?", i):
            for opener, what, fix in _GROUPS:
                if pattern.startswith(opener, i):
                    return _problem(pattern, i, len(opener), what, fix)
            j = i + 2
            while j < n and (pattern[j].isalpha() or pattern[j] == "-"):
                j += 1
            flags = pattern[i + 2:j]
            if flags and j < n and pattern[j] in ":)" and not set(flags) <= _RE2_FLAGS:
                bad = next(f for f in flags if f not in _RE2_FLAGS)
                return _problem(pattern, i, j - i + 1, "an inline flag group", f"RE2 has no "
                                f"flag {bad!r}: it takes i, m, s and U")
        if c in "*+?}" and i + 1 < n and pattern[i + 1] == "+" and _quantifies(pattern, i):
            return _problem(pattern, i, 2, "a possessive quantifier", "RE2 never "
                            f"backtracks, so the plain quantifier is already possessive: "
                            f"write {c!r}")
        i += 1
    return None


def _quantifies(pattern: str, i: int) -> bool:
    """Whether ``pattern[i]`` (``* + ? }``) ends a quantifier (not a literal ``}``)."""
    if pattern[i] != "}":
        return True
    start = pattern.rfind("{", 0, i)
    return start >= 0 and re.fullmatch(r"\d*(,\d*)?", pattern[start + 1:i]) is not None


def _problem(pattern: str, at: int, length: int, what: str, fix: str,
             who: str = "RE2 cannot run") -> PatternProblem:
    # the construct as written in the file (a repr would double its backslashes)
    return PatternProblem(f"'{pattern[at:at + length]}' is {what}, which {who} — {fix}", at)


@functools.lru_cache(maxsize=1)
def _re2_compiler():  # -> a function pattern -> error text or None
    try:
        import re2
    except ImportError:  # google-re2 comes with cel-python; Arrow's RE2 otherwise
        return _arrow_re2_error
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refusal on stderr

    def check(pattern: str) -> str | None:
        try:
            re2.compile(pattern, options=options)
        except re2.error as exc:
            arg = exc.args[0] if exc.args else exc
            return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
        return None

    return check


def _arrow_re2_error(pattern: str) -> str | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        pc.match_substring_regex(pa.array([""], pa.string()), pattern)
    except pa.ArrowInvalid as exc:
        return str(exc).removeprefix("Invalid regular expression: ")
    return None


def _re2_error(pattern: str) -> str | None:
    result: str | None = _re2_compiler()(pattern)
    return result


def _locate(pattern: str, why: str) -> int | None:
    """Where RE2's complaint is: its messages end with the offending text (``missing ]: [a-``),
    which is found in the pattern when it occurs there exactly once."""
    _, sep, text = why.partition(": ")
    if not sep or not text:
        return None
    if pattern.count(text) == 1:
        return pattern.index(text)
    return None
