"""Every docstring example in the package runs (style guide: examples are doctests)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import kqlab

MODULES = sorted(m.name for m in pkgutil.walk_packages(kqlab.__path__, "kqlab.")
                 if not m.name.endswith("_crecords"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS,
                             verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
