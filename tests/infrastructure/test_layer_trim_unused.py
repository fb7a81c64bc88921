"""What the layer's trim removed (pyarrow's dataset, sqlglot's other dialects, ...) is
unused by the service's code: no call, import or argument of it in the function."""

from __future__ import annotations

import ast

import pytest

from layers.layerbuild.layout import FUNCTION_DIR
from tests.infrastructure.layer_build import REPO, TRIMMED_PYARROW_MODULES, TRIMMED_SQLGLOT_MODULES

pytestmark = [pytest.mark.slow, pytest.mark.infrastructure, pytest.mark.timeout(1800)]


# ------------------------------------------------- what the trim removed is unused

#: ``pq.read_table`` keywords that its fallback (``ParquetFile``, when pyarrow.dataset is
#: absent) honours; filters, partitioning, schema, filesystem, ignore_prefixes and
#: arrow_extensions_enabled it refuses or ignores, and decryption needs the trimmed
#: encryption module.
READ_TABLE_WITHOUT_DATASET = frozenset({
    "columns", "use_threads", "use_pandas_metadata", "read_dictionary", "binary_type",
    "list_type", "memory_map", "buffer_size", "pre_buffer", "coerce_int96_timestamp_unit",
    "thrift_string_size_limit", "thrift_container_size_limit", "schema_depth_limit",
    "page_checksum_verification"})
#: APIs that need pyarrow.dataset (or Acero), directly or through polars.
NEEDS_DATASET = frozenset({"ParquetDataset", "write_to_dataset", "filters_to_expression",
                           "scan_pyarrow_dataset"})


#: sqlglot's calls that take a dialect, and which of their positional arguments are one.
DIALECT_ARGUMENTS = {"parse_one": slice(1, None), "parse": slice(1, None),
                     "transpile": slice(1, None), "tokenize": slice(1, None),
                     "sql": slice(0, 1), "get_or_raise": slice(0, 1)}


def test_the_service_uses_nothing_the_trim_removed() -> None:
    """Read from the function's source: no import of a trimmed pyarrow or sqlglot module or
    of Powertools' event handler (whose Swagger UI assets are gone), no sqlglot dialect
    named by a string (``read="duckdb"``, ``.sql("spark")``: the named dialects are gone),
    no API that needs pyarrow.dataset, no ``use_pyarrow`` (polars' way into pyarrow.csv and
    pq.read_table's dataset path), and ``pq.read_table`` only on one source with keywords
    its fallback to ParquetFile honours. The smoke check and the end-to-end run below show
    it by running."""
    removed = ({f"pyarrow.{m}" for m in TRIMMED_PYARROW_MODULES}
               | {"aws_lambda_powertools.event_handler", *TRIMMED_SQLGLOT_MODULES})
    read_table_calls = 0
    for path in sorted(FUNCTION_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for name in names:
                assert not any(name == r or name.startswith(r + ".") for r in removed), (
                    f"{where} imports {name}, which the layer does not ship")
            if isinstance(node, ast.Attribute):
                assert node.attr not in NEEDS_DATASET, f"{where}: {node.attr} needs pyarrow.dataset"
            if isinstance(node, ast.Call):
                keywords = {k.arg for k in node.keywords if k.arg is not None}
                assert "use_pyarrow" not in keywords, f"{where}: use_pyarrow"
                dialects = [k.value for k in node.keywords if k.arg in ("read", "write",
                                                                        "dialect")]
                if isinstance(node.func, ast.Attribute) and node.func.attr in DIALECT_ARGUMENTS:
                    dialects += node.args[DIALECT_ARGUMENTS[node.func.attr]]
                assert not [d for d in dialects if isinstance(d, ast.Constant)
                            and isinstance(d.value, str)], (
                    f"{where} names a sqlglot dialect, and the layer has only the default one")
                if isinstance(node.func, ast.Attribute) and node.func.attr == "read_table":
                    read_table_calls += 1
                    assert len(node.args) == 1, f"{where}: pq.read_table of one source"
                    assert len(keywords) == len(node.keywords), f"{where}: **kwargs"
                    assert keywords <= READ_TABLE_WITHOUT_DATASET, (
                        f"{where}: pq.read_table({', '.join(sorted(keywords))}) needs "
                        "pyarrow.dataset, which the layer does not ship")
    assert read_table_calls, "the page-level decoder no longer calls pq.read_table"
