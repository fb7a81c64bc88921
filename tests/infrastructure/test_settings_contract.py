"""The app's settings speak the function's contract: its output formats and query fields,
read from ``functions/s3slice/core/contract.py`` without the function package, and a
malformed contract refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from s3slice_cdk.settings import SettingsError
from tests.infrastructure.support import from_context

pytestmark = pytest.mark.infrastructure


# ------------------------------------------------------------- the function's contract
def test_output_formats_and_query_fields_are_the_functions() -> None:
    """The settings validate with the function's own names (``functions/s3slice/core/
    contract.py``, read by path), and the ``OutputFormat`` type agrees with them."""
    from typing import get_args

    from s3slice.core import contract as function_contract  # the package, as Lambda runs it
    from s3slice_cdk import settings

    assert settings.OUTPUT_FORMATS == function_contract.OUTPUT_FORMATS
    assert set(get_args(settings.OutputFormat)) == set(function_contract.OUTPUT_FORMATS)
    assert settings.QUERY_FIELDS == function_contract.QUERY_FIELDS
    for output_format in function_contract.OUTPUT_FORMATS:
        assert from_context(outputFormat=output_format).output_format == output_format
    with pytest.raises(SettingsError) as refused:
        from_context(outputFormat="xml")
    assert all(f in str(refused.value) for f in function_contract.OUTPUT_FORMATS)
    every_field = dict.fromkeys(function_contract.QUERY_FIELDS)
    assert set(from_context(query=json.dumps(every_field)).query) == (
        function_contract.QUERY_FIELDS)
    with pytest.raises(SettingsError) as unknown:
        from_context(query=json.dumps({**every_field, "colums": ["a"]}))
    assert "'colums'" in str(unknown.value)
    assert all(repr(f) in str(unknown.value) for f in function_contract.QUERY_FIELDS)


def test_the_contract_is_read_without_the_function_package() -> None:
    """The CDK app reads the function's contract and error tree by path: neither the
    ``s3slice`` package nor polars is imported (a fresh interpreter, as ``cdk synth``)."""
    import subprocess

    from tests.infrastructure.support import CDK_DIR

    script = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(CDK_DIR)!r})\n"
        "spec = importlib.util.spec_from_file_location(\n"
        f"    's3slice_cdk.contract', {str(CDK_DIR / 's3slice_cdk' / 'contract.py')!r})\n"
        "contract = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(contract)\n"
        "errors = contract.load_function_module(\n"
        "    contract.FUNCTION_PACKAGE_DIR / 'core' / 'errors.py')\n"
        "assert errors.error_types(retryable=False), errors\n"
        "loaded = sorted(n for n in sys.modules if n.split('.')[0] in ('s3slice', 'polars'))\n"
        "print(contract.OUTPUT_FORMATS, contract.PARTIALS, loaded)\n"
        "assert not loaded, loaded\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    from s3slice.core import contract as function_contract

    assert repr(function_contract.OUTPUT_FORMATS) in result.stdout
    assert function_contract.PARTIALS in result.stdout


def test_a_malformed_contract_is_refused(tmp_path: Path) -> None:
    from s3slice_cdk.contract import load_function_module, name, names

    path = tmp_path / "contract.py"
    path.write_text('FORMATS = ("parquet", "parquet")\nEMPTY = ()\nFIELDS = frozenset({"a"})\n'
                    'TEXT = "parquet"\nNESTED = "a/b"\nOK = "_partials"\n')
    module = load_function_module(path)
    assert names(module, "FIELDS") == ("a",)
    assert name(module, "OK") == "_partials"
    for attribute in ("FORMATS", "EMPTY", "TEXT", "MISSING"):
        with pytest.raises(TypeError, match=attribute):
            names(module, attribute)
    for attribute in ("NESTED", "EMPTY", "MISSING"):
        with pytest.raises(TypeError, match=attribute):
            name(module, attribute)
    broken = tmp_path / "broken.py"
    broken.write_text("def oops(:\n")
    with pytest.raises(SyntaxError):
        load_function_module(broken)
    assert not [m for m in sys.modules if m.endswith("_function.broken")]
