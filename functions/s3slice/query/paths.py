"""S3 Select path expressions (``s.b.c``, ``s.tags[0]``, ``s.projects[1].name``), each a
column of its own computed over the data. Finding them in a parsed query is
:mod:`.sqlglot.path_rewrite`'s (it needs sqlglot; computing them needs only polars).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import polars as pl

from s3slice.core.errors import QueryError, UnknownColumnError

#: The columns path expressions are computed into; no source column may be named so.
PATH_PREFIX = "__s3slice_path_"


@dataclasses.dataclass(frozen=True)
class Path:
    """An S3 Select path expression: a source column, then fields and 0-based indexes
    (``s.b.c``, ``s.tags[0]``, ``s.projects[1].name``), computed as the column ``name``."""

    name: str
    root: str
    steps: tuple[str | int, ...]

    @property
    def text(self) -> str:
        return self.root + "".join(f"[{s}]" if isinstance(s, int) else f".{s}"
                                   for s in self.steps)

    @property
    def label(self) -> str | None:
        """The output name S3 Select gives the path: its last step when that is an
        attribute (``s.b.c`` is ``c``); a path ending in an index is named by position."""
        last = self.steps[-1]
        return last if isinstance(last, str) else None

    def expr(self, schema: Mapping[str, pl.DataType]) -> pl.Expr:
        """The polars expression of the path over a frame of ``schema``; a field the data
        lacks, or a step into a value that is not a record or a list, is named."""
        expr = pl.col(self.root)
        dtype: object = schema[self.root]
        at = self.root
        for step in self.steps:
            if isinstance(step, str):
                if not isinstance(dtype, pl.Struct):
                    raise QueryError(f"{self.text}: {at} is {dtype}, not a record, so it has "
                                     f"no attribute {step!r}")
                fields = {f.name: f.dtype for f in dtype.fields}
                if step not in fields:
                    raise UnknownColumnError([f"{at}.{step}"], source=f"the record {at}",
                                             available=list(fields))
                expr, dtype = expr.struct.field(step), fields[step]
                at = f"{at}.{step}"
            else:
                if isinstance(dtype, pl.List):
                    inner = dtype.inner
                    expr = (expr.list.get(step, null_on_oob=True) if step >= 0
                            else pl.lit(None, dtype=inner))
                elif isinstance(dtype, pl.Array):
                    inner = dtype.inner
                    expr = (expr.arr.get(step, null_on_oob=True) if step >= 0
                            else pl.lit(None, dtype=inner))
                else:
                    raise QueryError(f"{self.text}: {at} is {dtype}, not a list, so it "
                                     f"cannot be indexed")
                assert inner is not None
                dtype = inner
                at = f"{at}[{step}]"
        return expr.alias(self.name)


def with_paths(lf: pl.LazyFrame, paths: Sequence[Path]) -> pl.LazyFrame:
    """``lf`` with a column for each path."""
    schema = lf.collect_schema()
    return lf.with_columns(p.expr(schema) for p in paths)
