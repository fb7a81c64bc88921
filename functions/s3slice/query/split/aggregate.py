"""The split of an aggregate query (with or without ``GROUP BY``): partial states per
group of each batch, merged by the final plan (see :mod:`.planner` for what each aggregate
becomes).
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from s3slice.core.errors import QueryError
from s3slice.query.split.plan import PARTIALS_TABLE
from s3slice.query.split.shape import VARIANCE
from s3slice.query.split.sql import (
    PREFIX,
    agg_name,
    aggregates,
    col,
    is_star,
    limit_of,
    output_names,
    position,
    select_sql,
    strip,
    unalias,
)
from s3slice.query.split.types import as_double, pooled_means, sum_parts, typed, widened


@dataclasses.dataclass
class _State:
    """One partial column: its name and the aggregate computing it per batch group."""

    name: str
    expr: exp.Expr


class AggregateSplit:
    """Aggregates with or without GROUP BY: partial states per batch group, merged."""

    def __init__(self, select: exp.Select) -> None:
        self.select = select
        self.outputs = list(select.expressions)
        for e in self.outputs:
            if is_star(e):
                raise QueryError("the query cannot be split across batches: SELECT * with "
                                 "an aggregate or GROUP BY")
        self.aliases: dict[str, exp.Expr] = {e.alias: e.this for e in self.outputs
                                             if isinstance(e, exp.Alias)}
        self.states: list[_State] = []
        self.finals: dict[str, exp.Expr] = {}  # an aggregate's SQL -> its final form
        self.distinct: dict[str, str] = {}  # a DISTINCT argument's SQL -> its column
        self.distinct_exprs: list[exp.Expr] = []
        #: per variance argument: (pooled mean, partial mean, n, mean, exact sum, witness)
        self.means: list[tuple[str, str, str, str, str, str]] = []
        self.keys: dict[str, str] = {}  # a group key's SQL -> its column
        self.key_exprs: list[exp.Expr] = []

    def build(self) -> tuple[str, str]:
        """The partial and the final plan's SQL."""
        group = self.select.args.get("group")
        for node in group.expressions if group is not None else []:
            expr = position(node, self.outputs, "GROUP BY")
            if expr is None and isinstance(node, exp.Column) and not node.table and (
                    node.name in self.aliases):
                expr = self.aliases[node.name].copy()
            expr = expr if expr is not None else node.copy()
            if aggregates(expr):
                raise QueryError(f"GROUP BY {node.sql()}: a group key cannot be an aggregate")
            text = strip(expr)
            if text not in self.keys:
                self.keys[text] = f"{PREFIX}k{len(self.keys)}"
                self.key_exprs.append(expr)

        names = output_names(self.outputs)
        final_outputs = [exp.alias_(self.rewrite(unalias(e), "SELECT"),
                                    exp.to_identifier(n, quoted=True))
                         for e, n in zip(self.outputs, names, strict=True)]
        having = self.select.args.get("having")
        final_having = (self.rewrite(self.resolve(having.this), "HAVING")
                        if having is not None else None)
        order = self.select.args.get("order")
        final_order: list[exp.Expr] = []
        for ordered in order.expressions if order is not None else []:
            node = ordered.this
            expr = position(node, self.outputs, "ORDER BY")
            expr = expr if expr is not None else self.resolve(node)
            final_order.append(exp.Ordered(this=self.rewrite(expr, "ORDER BY"),
                                           desc=ordered.args.get("desc"),
                                           nulls_first=ordered.args.get("nulls_first")))

        # The partial plan: group keys, DISTINCT arguments and states per batch group.
        partial = exp.select(
            *[exp.alias_(k.copy(), exp.to_identifier(self.keys[strip(k)], quoted=True))
              for k in self.key_exprs],
            *[exp.alias_(d.copy(), exp.to_identifier(self.distinct[strip(d)], quoted=True))
              for d in self.distinct_exprs],
            *[exp.alias_(s.expr, exp.to_identifier(s.name, quoted=True)) for s in self.states])
        if not partial.expressions:  # SELECT 1 ... GROUP BY nothing: the row count shapes it
            self.state(exp.Count(this=exp.Star()), "c")
            partial.set("expressions", [exp.alias_(self.states[-1].expr, exp.to_identifier(
                self.states[-1].name, quoted=True))])
        partial.set("from_", self.select.args.get("from_") or self.select.args.get("from"))
        if self.select.args.get("where") is not None:
            partial.set("where", self.select.args["where"].copy())
        grouping = [k.copy() for k in self.key_exprs] + [d.copy() for d in self.distinct_exprs]
        if grouping:
            partial.set("group", exp.Group(expressions=grouping))

        # The final plan over the partials.
        source: exp.Expr = exp.to_table(PARTIALS_TABLE)
        if self.means:
            by = [col(c) for c in self.keys.values()]
            columns = [e for means in self.means for e in pooled_means(by, *means)]
            source = exp.Subquery(
                this=exp.select(exp.Star(), *columns).from_(exp.to_table(PARTIALS_TABLE)),
                alias=exp.TableAlias(this=exp.to_identifier(PARTIALS_TABLE)))
        final = exp.select(*final_outputs).from_(source)
        if self.select.args.get("distinct") is not None:
            final.set("distinct", exp.Distinct())
        if self.keys:
            final.set("group", exp.Group(expressions=[col(c) for c in self.keys.values()]))
        if final_having is not None:
            final.set("having", exp.Having(this=final_having))
        if final_order:
            final.set("order", exp.Order(expressions=final_order))
        limit = limit_of(self.select)
        if limit is not None:
            if limit[0] >= 0:
                final.set("limit", exp.Limit(expression=exp.Literal.number(limit[0])))
            if limit[1]:
                final.set("offset", exp.Offset(expression=exp.Literal.number(limit[1])))
        return select_sql(partial), select_sql(final)

    def wide(self) -> tuple[str, ...]:
        """The partial columns holding exact sums (Int128, stored as Decimal(38, 0))."""
        return tuple(s.name for s in self.states if s.name.startswith(f"{PREFIX}s"))

    @staticmethod
    def over(agg: exp.Expr, by: list[exp.Column]) -> exp.Window:
        return exp.Window(this=agg, partition_by=[c.copy() for c in by] or None)

    def resolve(self, node: exp.Expr) -> exp.Expr:
        """HAVING and ORDER BY may name an output by its alias (``HAVING n > 1``); a name
        that is a group key stays the key."""
        def visit(n: exp.Expr) -> exp.Expr:
            if (isinstance(n, exp.Column) and not n.table and n.name in self.aliases
                    and strip(n) not in self.keys):
                return self.aliases[n.name].copy()
            return n
        return node.copy().transform(visit)

    def rewrite(self, node: exp.Expr, clause: str) -> exp.Expr:
        """``node`` over the partial columns: group keys become their columns, aggregates
        their merged forms; any other source column is an error (neither grouped nor
        aggregated)."""
        def visit(n: exp.Expr) -> exp.Expr:
            text = strip(n) if not isinstance(n, exp.Literal) else None
            if text is not None and text in self.keys:
                return col(self.keys[text])
            if isinstance(n, exp.AggFunc):
                return self.aggregate(n)
            if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                raise QueryError(f"{clause}: the column {n.sql()} is neither grouped nor "
                                 f"inside an aggregate")
            return n
        return node.copy().transform(visit)

    def state(self, expr: exp.Expr, kind: str) -> str:
        """The partial column computing ``expr`` per batch group (one per distinct SQL)."""
        text = expr.sql()
        for s in self.states:
            if s.expr.sql() == text:
                return s.name
        name = f"{PREFIX}{kind}{len(self.states)}"
        self.states.append(_State(name, expr))
        return name

    def witness(self, arg: exp.Expr) -> str:
        """A partial column of ``arg``'s own type (its MIN), by which the final step types
        the exact merged value (:mod:`.types`)."""
        return self.state(exp.Min(this=arg.copy()), "min")

    def exact_sums(self, arg: exp.Expr) -> list[exp.Expr]:
        """The final plan's sums of the partial sums of ``arg``'s parts (:func:`sum_parts`),
        which the final step combines into the exact sum."""
        return [exp.Sum(this=col(self.state(exp.Sum(this=p), "s"))) for p in sum_parts(arg)]

    def distinct_column(self, arg: exp.Expr) -> str:
        text = strip(arg)
        if text not in self.distinct:
            self.distinct[text] = f"{PREFIX}d{len(self.distinct)}"
            self.distinct_exprs.append(arg.copy())
        return self.distinct[text]

    def aggregate(self, node: exp.AggFunc) -> exp.Expr:
        """The final form of one aggregate call, registering its partial states."""
        text = node.sql()
        if text in self.finals:
            return self.finals[text].copy()
        if aggregates(node.this) if isinstance(node.this, exp.Expr) else False:
            raise QueryError(f"{node.sql()}: an aggregate cannot contain an aggregate")
        final = self._aggregate(node)
        self.finals[text] = final
        return final.copy()

    def _aggregate(self, node: exp.AggFunc) -> exp.Expr:
        arg = node.this
        zero = exp.Literal.number(0)
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise QueryError(f"the query cannot be split across batches: {node.sql()} "
                                 f"(DISTINCT over several values)")
            value = arg.expressions[0]
            if isinstance(node, exp.Min | exp.Max):  # DISTINCT changes nothing
                return self._aggregate(type(node)(this=value.copy()))
            if not isinstance(node, exp.Count | exp.Sum | exp.Avg):
                raise QueryError(f"the query cannot be split across batches: "
                                 f"{agg_name(node)}(DISTINCT ...) ({node.sql()})")
            d = self.distinct_column(value)
            if isinstance(node, exp.Sum):  # summed exactly, typed by the values' own column
                return typed("sum", d, exp.Sum(this=exp.Distinct(expressions=[widened(col(d))])))
            merged = type(node)(this=exp.Distinct(expressions=[col(d)]))
            return exp.Coalesce(this=merged, expressions=[zero]) if isinstance(
                node, exp.Count) else merged
        if isinstance(node, exp.Count):
            c = self.state(exp.Count(this=arg.copy() if arg is not None else exp.Star()), "c")
            return exp.Coalesce(this=exp.Sum(this=col(c)), expressions=[zero])
        if isinstance(node, exp.Sum):  # exact: a decimal's sum in parts (split_types)
            return typed("sum", self.witness(arg), *self.exact_sums(arg))
        if isinstance(node, exp.Min | exp.Max):
            kind = "min" if isinstance(node, exp.Min) else "max"
            return type(node)(this=col(self.state(type(node)(this=arg.copy()), kind)))
        if isinstance(node, exp.Avg):  # the exact sum over the count, divided once
            total, *parts = self.exact_sums(arg)
            n = self.state(exp.Count(this=arg.copy()), "c")
            return typed("avg", self.witness(arg), total, exp.Nullif(
                this=exp.Sum(this=col(n)), expression=zero), *parts)
        if isinstance(node, VARIANCE):
            return self._variance(node, arg)
        raise QueryError(f"the query cannot be split across batches: the aggregate "
                         f"{agg_name(node)} ({node.sql()}) has no exact partial form")

    def _variance(self, node: exp.AggFunc, arg: exp.Expr) -> exp.Expr:
        """Sample variance (polars SQL's STDDEV, STDDEV_SAMP, VARIANCE, VAR, VAR_SAMP) by
        Chan's parallel merge of (n, mean, M2) per batch group."""
        one = exp.Literal.number(1)
        n = self.state(exp.Count(this=arg.copy()), "c")
        m = self.state(exp.Avg(this=as_double(arg)), "m")
        m2 = self.state(exp.Coalesce(this=exp.Mul(
            this=exp.Variance(this=as_double(arg)),
            expression=exp.Paren(this=exp.Sub(this=exp.Count(this=arg.copy()), expression=one))),
            expressions=[exp.Literal.number(0)]), "q")
        total_sum, w = self.state(exp.Sum(this=widened(arg)), "s"), self.witness(arg)
        found = next((e for e in self.means if e[2:4] == (n, m)), None)
        if found is None:
            i = len(self.means)
            found = (f"{PREFIX}g{i}", f"{PREFIX}mx{i}", n, m, total_sum, w)
            self.means.append(found)
        dev = exp.Paren(this=exp.Sub(this=col(found[1]), expression=col(found[0])))
        total = exp.Add(this=exp.Sum(this=col(m2)), expression=exp.Sum(this=exp.Mul(
            this=col(n), expression=exp.Mul(this=dev, expression=dev.copy()))))
        count = exp.Sum(this=col(n))
        var = exp.Case(ifs=[exp.If(this=exp.GT(this=count, expression=one.copy()),
                                   true=exp.Div(this=exp.Paren(this=total), expression=exp.Paren(
                                       this=exp.Sub(this=count.copy(), expression=one.copy()))))])
        if isinstance(node, exp.Stddev | exp.StddevSamp):
            return typed("var", w, exp.Sqrt(this=var))
        return typed("var", w, var)
