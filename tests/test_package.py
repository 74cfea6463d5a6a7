"""The package surface: a light ``import kqlab`` and a complete, resolvable public API."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kqlab


def test_import_kqlab_stays_light():
    code = ("import sys, kqlab; heavy = [m for m in ('pyarrow', 'pandas', 'numpy', 'pyspark', "
            "'confluent_kafka', 'ipywidgets', 'plotly', 'kafka') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""


@pytest.mark.parametrize("name", sorted(set(kqlab.__all__) - {"__version__"}))
def test_every_public_name_resolves(name):
    assert getattr(kqlab, name) is not None
    assert name in dir(kqlab)


def test_all_lists_exactly_the_lazy_exports():
    assert set(kqlab.__all__) == set(kqlab._EXPORTS) | {"__version__"}


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = kqlab.nope


def test_public_api_round_trip():
    data = kqlab.build_batch([kqlab.Record(key=b"k", value=b"v")], base_timestamp=1)
    decoded = kqlab.decode_records(data, topic="t", partition=0)
    assert decoded.records.schema == kqlab.RECORDS_SCHEMA
    assert decoded.records.column("value").to_pylist() == [b"v"]
    verdicts = kqlab.validate_batches([data], topic="t", partition=0, now=1, source="producer")
    assert verdicts.schema == kqlab.BATCH_VERDICTS_SCHEMA
    assert verdicts.column("error_code").to_pylist() == [0]
