"""Random queries in the service's dialect over a frame's columns: filters (comparisons,
``+ - *`` near the type's edges, AND/OR/NOT, IN, BETWEEN, IS NULL, LIKE, string functions,
CAST) and SQL (projections, GROUP BY with COUNT/SUM/MIN/MAX/AVG, ORDER BY with LIMIT).
Constants are often the column's own values, so that filters keep some rows."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import random
from typing import Any

import polars as pl


@dataclasses.dataclass(frozen=True)
class Query:
    """A query as the service takes it, and the SQL the references run for it."""

    request: dict[str, Any]  # "filter"/"columns" or "sql"
    sql: str  # over the table s3object
    ordered: bool  # ORDER BY: rows compared in sequence
    aggregate: bool  # floats compared with a tolerance

    def describe(self) -> str:
        return self.request.get("sql") or (
            f"columns={self.request.get('columns')} filter={self.request.get('filter')!r}")


_INT_EDGES = {pl.Int8: 7, pl.Int16: 15, pl.Int32: 31, pl.Int64: 63,
              pl.UInt8: 8, pl.UInt16: 16, pl.UInt32: 32, pl.UInt64: 64}


def _kind(dtype: pl.DataType) -> str:
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    if isinstance(dtype, pl.Decimal):
        return "decimal"
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Categorical | pl.Enum):
        return "string"
    if dtype == pl.Boolean:
        return "bool"
    if dtype == pl.Date:
        return "date"
    if isinstance(dtype, pl.Datetime):
        return "datetime"
    if isinstance(dtype, pl.Struct):
        return "struct"
    return "other"  # binary, lists, null: IS NULL only


def _text(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def literal(value: Any, kind: str, dtype: pl.DataType) -> str | None:
    """``value`` as a SQL constant of the column's kind; None where none is written."""
    if value is None:
        return None
    if kind == "int":
        return str(value)
    if kind == "float":
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return repr(float(value))
    if kind == "decimal":
        return str(value) if isinstance(value, decimal.Decimal) else None
    if kind == "string":
        return _text(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "date":
        return f"DATE '{value.isoformat()}'"
    if kind == "datetime" and isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return _text(value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00:00"))
        return f"TIMESTAMP '{value.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    return None


class Generator:
    """Queries over ``frame``'s columns, drawn from ``rng``."""

    def __init__(self, rng: random.Random, frame: pl.DataFrame, *, plain: bool = False
                 ) -> None:
        """``plain``: conditions compare bare columns with constants only (what a scan
        that prunes by statistics is handed whole)."""
        self.rng, self.frame, self.plain = rng, frame, plain
        self.kinds = {n: _kind(t) for n, t in frame.schema.items()}

    def value(self, name: str) -> str | None:
        column = self.frame[name]
        kind, dtype = self.kinds[name], self.frame.schema[name]
        rng = self.rng
        if column.len() and rng.random() < 0.7:
            try:
                return literal(column[rng.randrange(column.len())], kind, dtype)
            except (OverflowError, ValueError):  # a date Python's datetime cannot hold
                pass
        if kind == "int":
            bits = _INT_EDGES.get(type(dtype) if not isinstance(dtype, type) else dtype, 63)
            edge = (1 << bits) - 1
            return str(rng.choice([0, 1, -1, 3, edge, edge - 1, -edge - 1, rng.randint(-99, 99),
                                   3571596662, 1 << 32, -(1 << 31)]))
        if kind in ("float", "decimal"):
            return rng.choice(["0", "1.5", "-2.25", "0.1", "1e10", "-1e-5", "100"])
        if kind == "string":
            return _text(rng.choice(["", "a", "ab", "north", "é", "zz", "A"]))
        if kind == "bool":
            return rng.choice(["true", "false"])
        if kind == "date":
            return rng.choice(["DATE '2024-01-01'", "DATE '1970-01-01'", "DATE '2023-12-01'"])
        if kind == "datetime":
            zoned = getattr(dtype, "time_zone", None) is not None
            return ("'2024-01-10 00:00:00+00:00'" if zoned
                    else "TIMESTAMP '2024-01-10 06:30:00'")
        return None

    def atom(self) -> str:
        rng = self.rng
        name = rng.choice(list(self.kinds))
        kind, col = self.kinds[name], name
        if kind in ("other", "struct") or rng.random() < 0.1:
            if kind == "struct" and rng.random() < 0.5:
                return f"{col}.a IS NOT NULL"
            return f"{col} IS {rng.choice(['', 'NOT '])}NULL"
        if kind == "bool":
            return rng.choice([col, f"NOT {col}", f"{col} = true", f"{col} <> false"])
        op = rng.choice(["=", "<>", "<", "<=", ">", ">="])
        k = self.value(name)
        if k is None:
            return f"{col} IS NULL"
        r = rng.random()
        if self.plain and r < 0.55:
            r = 0.55 + 0.45 * rng.random()  # no arithmetic, CAST or function
        if kind == "int" and r < 0.35:
            arith = rng.choice(["+", "-", "*"])
            operand = rng.choice(["1", "2", "3", "-1", "100", "2147483647", "4294967295"])
            return f"{col} {arith} {operand} {op} {k}"
        if kind in ("int", "float", "decimal") and r < 0.45:
            return f"CAST({col} AS {rng.choice(['BIGINT', 'DOUBLE', 'INT'])}) {op} {k}"
        if kind == "float" and r < 0.5:
            return rng.choice([f"{col} = {col}", f"{col} <> {col}", f"{col} + 1 > {col}"])
        if kind == "string" and r < 0.55:
            pattern = _text(rng.choice(["a%", "%b", "%a%", "_", "a_b", "%", "n%h", "é%"]))
            func = rng.choice(["LOWER", "UPPER", "TRIM", ""])
            subject = f"{func}({col})" if func else col
            if rng.random() < 0.3:
                return f"CHAR_LENGTH({col}) {op} {rng.randint(0, 4)}"
            if rng.random() < 0.2:
                return f"SUBSTRING({col} FROM {rng.randint(1, 3)} FOR {rng.randint(1, 3)}) {op} {k}"
            return f"{subject} {rng.choice(['', 'NOT '])}LIKE {pattern}"
        if r < 0.65:
            lo, hi = self.value(name), self.value(name)
            if lo is not None and hi is not None:
                return f"{col} {rng.choice(['', 'NOT '])}BETWEEN {lo} AND {hi}"
        if r < 0.8:
            items = [v for v in (self.value(name) for _ in range(rng.randint(1, 4))) if v]
            if items:
                return f"{col} {rng.choice(['', 'NOT '])}IN ({', '.join(items)})"
        return f"{col} {op} {k}" if rng.random() < 0.8 else f"{k} {op} {col}"

    def condition(self, depth: int = 0) -> str:
        rng = self.rng
        if depth >= 2 or rng.random() < 0.45:
            return self.atom()
        r = rng.random()
        if r < 0.15:
            return f"NOT ({self.condition(depth + 1)})"
        joiner = " AND " if r < 0.6 else " OR "
        return "(" + joiner.join(self.condition(depth + 1)
                                 for _ in range(rng.randint(2, 3))) + ")"

    def query(self, *, filtered: bool = False) -> Query:
        """A query; a ``filter`` request (columns and a condition) when ``filtered``."""
        rng, names = self.rng, list(self.kinds)
        r = rng.random()
        if r < 0.45 or filtered:
            columns = rng.sample(names, rng.randint(1, len(names)))
            where = self.condition()
            request: dict[str, Any] = {"filter": where}
            if rng.random() < 0.8:
                request["columns"] = columns
            else:
                columns = names
            sql = f"SELECT {', '.join(columns)} FROM s3object WHERE {where}"
            return Query(request, sql, ordered=False, aggregate=False)
        where = f" WHERE {self.condition()}" if rng.random() < 0.7 else ""
        if r < 0.65:
            columns = rng.sample(names, rng.randint(1, len(names)))
            sortable = [c for c in columns if self.kinds[c] not in ("other", "struct")]
            order = ""
            if sortable and rng.random() < 0.7:
                keys = ", ".join(f"{c} {self._direction()}" for c in sortable)
                ordered = sortable == columns
                order = f" ORDER BY {keys} LIMIT {rng.choice([0, 1, 5, 100])}" if ordered \
                    else f" ORDER BY {keys}"
            else:
                ordered = False
            sql = f"SELECT {', '.join(columns)} FROM s3object{where}{order}"
            return Query({"sql": sql}, sql, ordered=ordered, aggregate=False)
        return self._aggregate(where)

    def _direction(self) -> str:
        """A sort direction, its nulls' place said (the references' defaults differ)."""
        return (f"{self.rng.choice(['ASC', 'DESC'])} "
                f"NULLS {self.rng.choice(['FIRST', 'LAST'])}")

    def _aggregate(self, where: str) -> Query:
        rng, names = self.rng, list(self.kinds)
        keys = [n for n in names if self.kinds[n] in ("int", "string", "bool", "date",
                                                       "decimal", "datetime")]
        group = rng.sample(keys, min(len(keys), rng.randint(0, 2)))
        items = [*group, "COUNT(*) AS n"]
        for i, name in enumerate(rng.sample(names, rng.randint(1, len(names)))):
            kind = self.kinds[name]
            funcs = ["COUNT"]
            if kind in ("int", "float", "decimal"):
                funcs += ["SUM", "MIN", "MAX", "AVG"]
            elif kind in ("string", "date", "datetime", "bool"):
                funcs += ["MIN", "MAX"]
            func = rng.choice(funcs)
            items.append(f"{func}({name}) AS a{i}")
        sql = f"SELECT {', '.join(items)} FROM s3object{where}"
        ordered = False
        if group:
            sql += f" GROUP BY {', '.join(group)}"
            if rng.random() < 0.4:
                sql += (" ORDER BY " + ", ".join(f"{g} {self._direction()}" for g in group)
                        + f" LIMIT {rng.choice([1, 3, 50])}")
                ordered = True
        return Query({"sql": sql}, sql, ordered=ordered, aggregate=True)
