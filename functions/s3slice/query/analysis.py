"""Query analysis: what a query reads, what it may prune by, and how polars runs it.

SQL and filters are parsed with sqlglot to learn their columns, to check that the SQL
reaches for nothing but the query's source, and to lift the pushable part of WHERE into
the pruning predicate (:mod:`._predicate`). Execution is polars' own: ``pl.sql_expr``
for filters and ``pl.SQLContext`` for SQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import sqlglot
from sqlglot import exp, parser
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from s3slice._errors import FilterSyntaxError, ForbiddenQueryError, QueryError, UnknownColumnError
from s3slice._model import Query
from s3slice.query import predicate as P

SOURCE_TABLE = "s3object"
# polars SQL table functions that read files; no query may name them anywhere.
_FILE_FUNCTIONS = ("read_csv", "read_parquet", "read_json", "read_ndjson", "read_ipc",
                   "read_delta", "read_excel", "read_avro", "scan_")
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



@dataclasses.dataclass(frozen=True, kw_only=True)
class Analysis:
    """A query, understood: its columns, its pruning predicate and how to run it."""

    query: Query
    columns: tuple[str, ...] | None  # None: every column
    referenced: frozenset[str]  # every name the query uses as a source column
    #: Names that are a source column or one of the query's own aliases (``SUM(v) AS v``
    #: orders by ``v``): fetched when the data has them, never an unknown column.
    optional: frozenset[str] = frozenset()
    #: Path expressions (``s.b.c``, ``s.tags[0]``), each computed as a column of its own;
    #: ``where_paths`` are those the row filter uses.
    paths: tuple[Path, ...] = ()
    where_paths: tuple[Path, ...] = ()
    #: Source columns the query names whole (not only through a path).
    whole: frozenset[str] = frozenset()
    predicate: P.Pred
    where: str | None  # the row filter polars applies to each piece as it is read
    sql: str | None  # the SQL run over the concatenated pieces (sources renamed)
    table_names: tuple[str, ...]
    #: One object's hive partition values and their types (see :mod:`._sources`).
    partitions: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    partition_types: Mapping[str, pl.DataType] = dataclasses.field(default_factory=dict)
    #: The partition values rule every row out: read the schema, no rows.
    pruned: bool = False

    def for_object(self, values: Mapping[str, Any], types: Mapping[str, pl.DataType], *,
                   pruned: bool = False) -> Analysis:
        if not values and not pruned:
            return self
        return dataclasses.replace(self, partitions=values, partition_types=types,
                                   pruned=pruned)

    def fields(self) -> dict[str, frozenset[str]]:
        """Columns the query reads only through attribute paths (``s.b.c``, ``s.b.d[0]``),
        each with the dotted fields it needs (``b.c``, ``b.d``): their other fields need
        not be read. A column also named whole, or indexed at its root, is not here."""
        if self.columns is None:  # SELECT *: every column whole
            return {}
        whole = set(self.whole)
        out: dict[str, set[str]] = {}
        for path in self.paths:
            attributes: list[str] = []
            for step in path.steps:
                if not isinstance(step, str):
                    break
                attributes.append(step)
            if not attributes:
                whole.add(path.root)
            else:
                out.setdefault(path.root, set()).add(".".join([path.root, *attributes]))
        return {c: frozenset(f) for c, f in out.items() if c not in whole}

    @property
    def per_object(self) -> bool:
        """True when each object's result stands alone (no aggregate, order or limit)."""
        return self.sql is None and self.query.limit is None

    @property
    def early_limit(self) -> int | None:
        """Rows after which reading may stop: a limit with nothing else needing all rows."""
        return self.query.limit if self.sql is None else None

    def needed_columns(self, schema: Sequence[str], *, source: str) -> list[str]:
        """Columns to fetch, in schema order, after checking that every name exists."""
        names = set(schema) | set(self.partitions)
        missing = sorted(c for c in self.referenced if c not in names)
        if missing:
            raise UnknownColumnError(missing, source=source,
                                     available=[*schema, *self.partitions])
        # A partition column is a constant of the object, never fetched.
        stored = [c for c in schema if c not in self.partitions]
        if self.columns is None:
            return stored
        wanted = self.referenced | self.optional | set(self.columns)
        return [c for c in stored if c in wanted]

    def prefilter(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """The per-piece step: the row filter, and the limit when nothing else needs rows."""
        if self.partitions:
            lf = lf.with_columns(pl.lit(v, dtype=self.partition_types[k]).alias(k)
                                 for k, v in self.partitions.items())
        if self.where is not None:
            if self.where_paths:
                lf = with_paths(lf, self.where_paths)
            lf = _sql_filter(lf, self.where)
            if self.where_paths:
                lf = lf.drop([p.name for p in self.where_paths])
        if self.sql is None:
            if self.columns is not None:
                lf = lf.select(list(self.columns))
            if self.query.limit is not None:
                lf = lf.limit(self.query.limit)
        return lf

    def finish(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """The final step over all pieces: projection and limit, or the whole SQL."""
        if self.sql is None:
            if self.columns is not None:
                lf = lf.select(list(self.columns))
            if self.query.limit is not None:
                lf = lf.limit(self.query.limit)
            return lf
        if self.paths:
            names = set(lf.collect_schema().names())
            lf = with_paths(lf, [p for p in self.paths if p.root in names])
        ctx = pl.SQLContext(frames=dict.fromkeys(self.table_names, lf))
        try:
            return ctx.execute(self.sql, eager=False)
        except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError) as e:
            raise FilterSyntaxError(f"sql: {_plain(str(e))}") from e


def collect(lf: pl.LazyFrame) -> pl.DataFrame:
    """Run a lazy query; what polars rejects at run time becomes a :class:`QueryError`."""
    try:
        return lf.collect()
    except (pl.exceptions.ColumnNotFoundError, pl.exceptions.SchemaFieldNotFoundError) as e:
        raise QueryError(f"the query names a column the data does not have: "
                         f"{_first_line(e)}") from e
    except (pl.exceptions.InvalidOperationError, pl.exceptions.SchemaError,
            pl.exceptions.ComputeError, pl.exceptions.SQLSyntaxError,
            pl.exceptions.SQLInterfaceError) as e:
        raise QueryError(f"the query cannot run on this data: {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


_PIECE = "__s3slice_piece"


def _sql_filter(lf: pl.LazyFrame, where: str) -> pl.LazyFrame:
    """``lf``'s rows for which ``where`` holds, by polars' SQL engine (as the final SQL
    runs it: ``pl.sql_expr`` alone casts a string to a timestamp strictly, which polars
    no longer allows, where SQL parses it)."""
    ctx = pl.SQLContext(frames={_PIECE: lf})
    try:
        return ctx.execute(f'SELECT * FROM "{_PIECE}" WHERE {where}', eager=False)
    except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError,
            pl.exceptions.InvalidOperationError) as e:
        raise FilterSyntaxError(f"filter {where!r}: {_plain(str(e))}") from e


def _sql_expr(text: str) -> pl.Expr:
    try:
        return pl.sql_expr(text)
    except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError,
            pl.exceptions.InvalidOperationError) as e:
        raise FilterSyntaxError(f"filter {text!r}: {_plain(str(e))}") from e


# ----------------------------------------------------------------- the S3 Select dialect
# S3 Select's date functions, which polars SQL lacks, parsed by sqlglot into expressions
# polars runs. Their date part is a bare word: year, month, day, hour, minute or second.
_SECONDS = {"day": 86400, "hour": 3600, "minute": 60, "second": 1}
_DATE_PARTS = ("year", "month", *_SECONDS)
_S3SELECT_FUNCTIONS = ("DATE_ADD", "DATE_DIFF", "TO_TIMESTAMP", "UTCNOW")


def _date_part(node: exp.Expr, function: str) -> str:
    part = node.name.lower() if isinstance(node, exp.Column | exp.Var | exp.Literal) else ""
    part = part.removesuffix("s") if part.endswith("s") and part[:-1] in _DATE_PARTS else part
    if part not in _DATE_PARTS:
        raise FilterSyntaxError(f"{function}: the date part must be one of "
                                f"{', '.join(_DATE_PARTS)}, got {node.sql()!r}")
    return part


def _arity(args: Sequence[exp.Expr], n: int, function: str) -> None:
    if len(args) != n:
        raise FilterSyntaxError(f"{function} takes {n} argument(s), got {len(args)}")


def _date_add(args: Sequence[exp.Expr]) -> exp.Expr:
    """DATE_ADD(part, quantity, timestamp)."""
    _arity(args, 3, "DATE_ADD")
    part, quantity, ts = _date_part(args[0], "DATE_ADD"), args[1], args[2]
    if part in _SECONDS:
        return sqlglot.parse_one(f"({ts.sql()}) + ({quantity.sql()}) * INTERVAL '1' "
                                 f"{part.upper()}")
    ok, value = _literal(quantity)
    if not ok or not isinstance(value, int) or isinstance(value, bool):
        raise FilterSyntaxError(f"DATE_ADD({part}, ...): the quantity must be a whole number "
                                f"literal, got {quantity.sql()!r}")
    months = abs(value) * (12 if part == "year" else 1)
    sign = "-" if value < 0 else "+"
    return sqlglot.parse_one(f"({ts.sql()}) {sign} INTERVAL '{months}' MONTH")


def _date_diff(args: Sequence[exp.Expr]) -> exp.Expr:
    """DATE_DIFF(part, t1, t2): t2 - t1 in whole parts (calendar years and months; elapsed
    days, hours, minutes and seconds, truncated toward zero)."""
    _arity(args, 3, "DATE_DIFF")
    part, a, b = _date_part(args[0], "DATE_DIFF"), args[1].sql(), args[2].sql()
    years = f"(EXTRACT(YEAR FROM {b}) - EXTRACT(YEAR FROM {a}))"
    if part == "year":
        return sqlglot.parse_one(years)
    if part == "month":
        return sqlglot.parse_one(f"({years} * 12 + EXTRACT(MONTH FROM {b}) "
                                 f"- EXTRACT(MONTH FROM {a}))")
    return sqlglot.parse_one(f"CAST((DATE_PART('epoch', {b}) - DATE_PART('epoch', {a})) "
                             f"/ {_SECONDS[part]} AS BIGINT)")


def _to_timestamp(args: Sequence[exp.Expr]) -> exp.Expr:
    """TO_TIMESTAMP(text): an ISO 8601 timestamp (``2024-05-01T``, ``…T10:30Z``, with
    fractional seconds) as a UTC timestamp without time zone."""
    _arity(args, 1, "TO_TIMESTAMP")
    text = args[0]
    if isinstance(text, exp.Literal) and text.is_string:
        # A constant: parsed now, so that it can prune row groups like any literal.
        try:
            value = dt.datetime.fromisoformat(text.this.removesuffix("Z").removesuffix("T"))
        except ValueError as e:
            raise FilterSyntaxError(f"TO_TIMESTAMP: {text.this!r} is not an ISO 8601 "
                                    "timestamp") from e
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")),
                        exp.DataType.Type.TIMESTAMP)
    return sqlglot.parse_one(f"CAST(REGEXP_REPLACE({args[0].sql()}, '[TZ]$', '') AS TIMESTAMP)")


def _utcnow(args: Sequence[exp.Expr]) -> exp.Expr:
    """UTCNOW(): the time the query was analysed, once for the whole query."""
    _arity(args, 0, "UTCNOW")
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return exp.cast(exp.Literal.string(now.isoformat(sep=" ")), exp.DataType.Type.TIMESTAMP)


class S3SelectDialect(Dialect):
    """sqlglot's default dialect plus S3 Select's date functions, with polars' null
    ordering (nulls sort as the largest values), so that SQL generated back from a parsed
    query keeps an explicit ``NULLS LAST`` after ``DESC``."""

    NULL_ORDERING = "nulls_are_large"

    class Parser(parser.Parser):
        # sqlglot's extension point is this class attribute.
        FUNCTIONS = {**parser.Parser.FUNCTIONS, "DATE_ADD": _date_add,  # noqa: RUF012
                     "DATE_DIFF": _date_diff, "TO_TIMESTAMP": _to_timestamp,
                     "UTCNOW": _utcnow}


def _uses_s3select_functions(text: str) -> bool:
    upper = text.upper()
    return any(name in upper for name in _S3SELECT_FUNCTIONS)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _plain(message: str) -> str:
    """A message on one line without terminal escape codes (sqlglot underlines the
    offending token with them)."""
    return " ".join(_ANSI.sub("", message).split())


def _parse_error(e: ParseError | TokenError) -> str:
    """What sqlglot found wrong, and where, as plain text."""
    errors = getattr(e, "errors", None) or []
    if errors and isinstance(errors[0], dict) and errors[0].get("description"):
        first = errors[0]
        near = _plain(str(first.get("highlight") or ""))
        return _plain(f"{first['description']} at line {first.get('line')}, column "
                      f"{first.get('col')}" + (f", near {near!r}" if near else ""))
    return _plain(str(e))


def _parse(text: str, field: str) -> exp.Expr:
    try:
        parsed = sqlglot.parse(text, read=S3SelectDialect)
    except (ParseError, TokenError) as e:
        raise FilterSyntaxError(f"{field}: cannot parse {text!r}: {_parse_error(e)}") from e
    statements = [s for s in parsed if s is not None]
    if len(statements) != 1:
        raise FilterSyntaxError(f"{field}: expected one expression, found {len(statements)}")
    return statements[0]


def _check_functions(tree: exp.Expr, field: str) -> None:
    for node in tree.find_all(exp.Func):
        name = (node.sql_name() if not isinstance(node, exp.Anonymous) else node.name).lower()
        if name.startswith(_FILE_FUNCTIONS):
            raise ForbiddenQueryError(f"{field}: the function {name} is not allowed; a query "
                                      "reads only its own sources")


def _path_of(node: exp.Expr, qualifiers: set[str]) -> tuple[str, tuple[str | int, ...]] | None:
    """(root column, steps) when ``node`` is a column or a path expression; a leading name
    that is a table or its alias (``s`` in ``s.b.c``) is a qualifier, not a step."""
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            return None
        parts = [p.name for p in node.parts]
        if len(parts) > 1 and parts[0].lower() in qualifiers:
            parts = parts[1:]
        return parts[0], tuple(parts[1:])
    if isinstance(node, exp.Dot):
        inner = _path_of(node.this, qualifiers)
        if inner is None or not isinstance(node.expression, exp.Identifier):
            return None
        return inner[0], (*inner[1], node.expression.name)
    if isinstance(node, exp.Bracket):
        inner = _path_of(node.this, qualifiers)
        if inner is None:
            return None
        index = node.expressions[0] if len(node.expressions) == 1 else None
        ok, value = _literal(index) if index is not None else (False, None)
        if ok and isinstance(value, str) and isinstance(index, exp.Literal):
            return inner[0], (*inner[1], value)  # s.b['c'] is s.b.c
        if not ok or not isinstance(value, int) or isinstance(value, bool):
            raise FilterSyntaxError(f"{node.sql()}: an index must be a whole-number literal "
                                    "(0 is the first element) or a quoted attribute name")
        return inner[0], (*inner[1], value)
    return None


class _PathRewriter:
    """Replaces each path expression of a tree by the column it is computed into."""

    def __init__(self, qualifiers: set[str]) -> None:
        self.qualifiers = qualifiers
        self.paths: dict[tuple[str, tuple[str | int, ...]], Path] = {}

    def rewrite(self, tree: exp.Expr) -> tuple[exp.Expr, tuple[Path, ...]]:
        """The rewritten copy and the paths it uses."""
        used: dict[str, Path] = {}

        def visit(node: exp.Expr) -> exp.Expr:
            if not isinstance(node, exp.Column | exp.Dot | exp.Bracket):
                return node
            found = _path_of(node, self.qualifiers)
            if found is None or not found[1]:
                return node
            path = self.paths.get(found)
            if path is None:
                path = Path(f"{PATH_PREFIX}{len(self.paths)}", found[0], found[1])
                self.paths[found] = path
            used[path.name] = path
            return exp.column(exp.to_identifier(path.name, quoted=True))

        return tree.transform(visit), tuple(used.values())

    def label(self, tree: exp.Expr) -> None:
        """Name each unnamed select expression that starts with a path as S3 Select does:
        by the path's last attribute, else (a path ending in an index, or a name already
        taken) by position, ``_N``. And keep the path columns out of ``*``."""
        by_name = {p.name: p for p in self.paths.values()}
        for select in tree.find_all(exp.Select):
            taken = {e.alias_or_name for e in select.expressions}
            for i, e in enumerate(select.expressions):
                if isinstance(e, exp.Alias):
                    continue
                leftmost = next(iter(e.find_all(exp.Column, bfs=False)), None)
                if leftmost is None or leftmost.name not in by_name:
                    continue
                label = by_name[leftmost.name].label
                name = label if label is not None and label not in taken else f"_{i + 1}"
                taken.add(name)
                e.replace(exp.alias_(e.copy(), exp.to_identifier(name, quoted=True)))
            source = select.args.get("from_") or select.args.get("from")
            if not (isinstance(source, exp.From) and isinstance(source.this, exp.Table)
                    and source.this.name.lower() == SOURCE_TABLE):
                continue
            for e in select.expressions:
                star = e if isinstance(e, exp.Star) else (
                    e.this if isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
                    else None)
                if star is not None and not select.args.get("joins"):
                    hidden = [exp.column(exp.to_identifier(n, quoted=True)) for n in by_name]
                    e.replace(exp.Star(except_=hidden))


def _qualifiers(tree: exp.Expr) -> set[str]:
    """Names a column reference may start with that are not columns: the tables, their
    aliases and the query's own named subqueries."""
    names = {SOURCE_TABLE}
    for table in tree.find_all(exp.Table):
        names.add(table.name.lower())
        if table.alias:
            names.add(table.alias.lower())
    for node in tree.find_all(exp.CTE, exp.Subquery):
        if node.alias:
            names.add(node.alias.lower())
    return names


def _unqualified(tree: exp.Expr) -> exp.Expr:
    """A copy with table qualifiers dropped from column references (``s.a`` → ``a``)."""
    def strip(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and node.table:
            return exp.column(node.this.copy())
        return node
    return tree.copy().transform(strip)


def _literal(node: exp.Expr) -> tuple[bool, Any]:
    """(True, value) when ``node`` is a constant the statistics can be compared with."""
    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return True, node.this
        text = node.this
        try:
            return True, int(text)
        except ValueError:
            try:
                return True, float(text)
            except ValueError:
                return False, None
    if isinstance(node, exp.Neg):
        ok, v = _literal(node.this)
        return (True, -v) if ok and isinstance(v, int | float) else (False, None)
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        to = node.to.this
        try:
            if to == exp.DataType.Type.DATE:
                return True, dt.date.fromisoformat(node.this.this)
            if to in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME):
                return True, dt.datetime.fromisoformat(node.this.this)
        except ValueError:
            return False, None
    return False, None


_CMP: dict[type[exp.Expr], P.CmpOp] = {
    exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}


def _is_source_column(node: exp.Expr) -> bool:
    """A plain column reference, which row-group statistics describe (a path is not)."""
    return isinstance(node, exp.Column) and not node.name.startswith(PATH_PREFIX)


def to_predicate(node: exp.Expr) -> P.Pred:
    """The part of a condition the statistics can judge; the rest becomes ``Opaque``."""
    if isinstance(node, exp.Paren):
        return to_predicate(node.this)
    if isinstance(node, exp.And):
        return P.And((to_predicate(node.left), to_predicate(node.right)))
    if isinstance(node, exp.Or):
        return P.Or((to_predicate(node.left), to_predicate(node.right)))
    if isinstance(node, exp.Not):
        return P.Not(to_predicate(node.this))
    op = _CMP.get(type(node))
    if op is not None:
        left, right = node.args["this"], node.args["expression"]
        if _is_source_column(left):
            ok, value = _literal(right)
            if ok:
                return P.Cmp(left.name, op, value)
        if _is_source_column(right):
            ok, value = _literal(left)
            if ok:
                return P.Cmp(right.name, P.FLIP[op], value)
        return P.TRUE
    if isinstance(node, exp.Between) and _is_source_column(node.this):
        ok_lo, lo = _literal(node.args["low"])
        ok_hi, hi = _literal(node.args["high"])
        if ok_lo and ok_hi:
            return P.Between(node.this.name, lo, hi)
        return P.TRUE
    if isinstance(node, exp.In) and _is_source_column(node.this) and not node.args.get(
            "query"):
        values = [_literal(v) for v in node.expressions]
        if values and all(ok for ok, _ in values):
            return P.In(node.this.name, tuple(v for _, v in values))
        return P.TRUE
    if isinstance(node, exp.Is) and _is_source_column(node.this) and isinstance(
            node.expression, exp.Null):
        return P.IsNull(node.this.name)
    return P.TRUE


def _column_names(tree: exp.Expr) -> set[str]:
    """The columns a (rewritten) tree names: plain columns, and the roots of its paths."""
    return {c.name for c in tree.find_all(exp.Column)
            if not isinstance(c.this, exp.Star) and not c.name.startswith(PATH_PREFIX)}


def _analyze_filter(query: Query) -> Analysis:
    where: str | None = None
    predicate: P.Pred = P.TRUE
    referenced: set[str] = set(query.columns or ())
    whole = set(referenced)
    paths: tuple[Path, ...] = ()
    if query.filter is not None:
        tree = _parse(query.filter, "filter")
        if tree.find(exp.Select, exp.Table, exp.Subquery) is not None or isinstance(
                tree, exp.Command | exp.Create | exp.Drop | exp.Insert | exp.Update):
            raise ForbiddenQueryError("filter: must be a condition on columns, not a query")
        _check_functions(tree, "filter")
        tree, paths = _PathRewriter({SOURCE_TABLE}).rewrite(tree)
        qualified = any(c.table for c in tree.find_all(exp.Column))
        tree = _unqualified(tree)  # s3object.id is id
        whole |= _column_names(tree)
        referenced |= whole | {p.root for p in paths}
        predicate = to_predicate(tree)
        translated = paths or qualified or _uses_s3select_functions(query.filter)
        where = tree.sql(dialect=S3SelectDialect) if translated else query.filter
        _sql_expr(where)  # a filter polars cannot run fails now, before any byte is read
    return Analysis(query=query, columns=query.columns, referenced=frozenset(referenced),
                    predicate=predicate, where=where, sql=None, table_names=(),
                    paths=paths, where_paths=paths, whole=frozenset(whole))


def _analyze_sql(query: Query) -> Analysis:
    assert query.sql is not None
    tree = _parse(query.sql, "sql")
    if not isinstance(tree, exp.Query):
        raise ForbiddenQueryError(f"sql: only SELECT queries run here, got {tree.key.upper()}")
    _check_functions(tree, "sql")
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    table_names: set[str] = set()
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            raise ForbiddenQueryError(f"sql: {table.sql()!r} is not allowed; a query reads only "
                                      f"FROM {SOURCE_TABLE}")
        name = table.name
        if table.args.get("db") or table.args.get("catalog"):
            raise ForbiddenQueryError(f"sql: table {table.sql()!r} is not allowed; a query reads "
                                      f"only FROM {SOURCE_TABLE}")
        if name.lower() in ctes:
            continue
        if name.lower() != SOURCE_TABLE:
            raise ForbiddenQueryError(f"sql: table {name!r} is not allowed; a query reads only "
                                      f"FROM {SOURCE_TABLE}")
        table_names.add(name)
    if not table_names:
        raise ForbiddenQueryError(f"sql: the query must read FROM {SOURCE_TABLE}")

    rewriter = _PathRewriter(_qualifiers(tree))
    tree, paths = rewriter.rewrite(tree)
    if paths:
        rewriter.label(tree)
    # A name that is also one of the query's aliases may mean either (``SUM(v) AS v``
    # reads the column v; ``ORDER BY w`` may mean the alias w): it is fetched when the
    # data has it. Every other name must be a column of the data.
    aliases = {a.alias for a in tree.find_all(exp.Alias)}
    names = _column_names(tree) | {p.root for p in paths}
    referenced = {n for n in names if n not in aliases}
    optional = {n for n in names if n in aliases}
    star = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this,
               exp.Star)) for sel in tree.find_all(exp.Select) for e in sel.expressions)

    where: str | None = None
    where_paths: tuple[Path, ...] = ()
    predicate: P.Pred = P.TRUE
    top = tree if isinstance(tree, exp.Select) else None
    if (top is not None and not top.args.get("joins") and not top.args.get("with")
            and isinstance(top.args.get("from_") or top.args.get("from"), exp.From)):
        source = (top.args.get("from_") or top.args["from"]).this
        condition = top.args.get("where")
        if isinstance(source, exp.Table) and condition is not None:
            plain = _unqualified(condition.this)
            predicate = to_predicate(plain)
            where = plain.sql()
            used = {c.name for c in plain.find_all(exp.Column)}
            where_paths = tuple(p for p in paths if p.name in used)
            # WHERE sees the source's columns, never the select list's aliases.
            in_where = _column_names(plain) | {p.root for p in where_paths}
            referenced |= in_where
            optional -= in_where
    # The text polars runs: the user's own, unless S3 Select functions or paths were
    # translated.
    translated = paths or _uses_s3select_functions(query.sql)
    sql = tree.sql(dialect=S3SelectDialect) if translated else query.sql
    return Analysis(query=query, columns=None if star else tuple(sorted(referenced | optional)),
                    referenced=frozenset(referenced), optional=frozenset(optional),
                    predicate=predicate, where=where, sql=sql,
                    table_names=tuple(sorted(table_names)), paths=paths,
                    where_paths=where_paths, whole=frozenset(_column_names(tree)))


def s3select_names(sql: str) -> list[str] | None:
    """The names S3 Select gives the columns of ``sql``'s SELECT list, in order: an alias,
    a column's (or a path's last attribute's) name, else the position, ``_1``, ``_2``, …
    None when the list has a ``*`` (its width is the data's) or the SQL is not one
    SELECT."""
    try:
        tree = _parse(sql, "sql")
    except QueryError:
        return None
    if not isinstance(tree, exp.Select):
        return None
    names: list[str] = []
    for i, e in enumerate(tree.expressions):
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this,
                                                                                exp.Star)):
            return None
        if isinstance(e, exp.Alias):
            names.append(e.alias)
        elif isinstance(e, exp.Column):
            names.append(e.name)
        elif isinstance(e, exp.Dot) and isinstance(e.expression, exp.Identifier):
            names.append(e.expression.name)
        elif (isinstance(e, exp.Bracket) and len(e.expressions) == 1
              and isinstance(e.expressions[0], exp.Literal) and e.expressions[0].is_string):
            names.append(e.expressions[0].this)
        else:
            names.append(f"_{i + 1}")
    return names


def analyze(query: Query) -> Analysis:
    """Parse and check a query. Raises a :class:`QueryError` naming what is wrong."""
    try:
        return _analyze_sql(query) if query.sql is not None else _analyze_filter(query)
    except QueryError:
        raise
    except (ValueError, TypeError, KeyError) as e:  # sqlglot internals on odd input
        raise FilterSyntaxError(f"cannot analyse the query: {_plain(str(e))}") from e
