"""Where a value meets literals in a query: the comparisons (``=``, ``<>``, ``<``, ``<=``,
``>``, ``>=``, ``IS [NOT] DISTINCT FROM``), ``BETWEEN`` and ``IN`` of values, each as an
operand and its literals, for the rewrites that read literals by the operand's type
(:mod:`.zones`, :mod:`.text_numbers`)."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
               exp.NullSafeNEQ)

#: Given an operand, the literals it meets and the node where they meet: the operand and
#: literals rewritten, or None to leave them.
Rewrite = Callable[[exp.Expr, list[exp.Expr], exp.Expr],
                   tuple[exp.Expr, list[exp.Expr]] | None]


def rewrite_comparisons(tree: exp.Expr, rewrite: Rewrite) -> bool:
    """Apply ``rewrite`` to each comparison, ``BETWEEN`` and ``IN`` of values in ``tree``:
    a comparison offers each side in turn as the operand (the other as its literal) until
    one is rewritten. Whether anything was."""
    changed = False
    for node in list(tree.find_all(*COMPARISONS, exp.Between, exp.In)):
        if isinstance(node, exp.Between):
            out = rewrite(node.this, [node.args["low"], node.args["high"]], node)
            if out is not None:
                node.set("this", out[0])
                node.set("low", out[1][0])
                node.set("high", out[1][1])
        elif isinstance(node, exp.In):
            if node.args.get("query") or not node.expressions:
                continue
            out = rewrite(node.this, list(node.expressions), node)
            if out is not None:
                node.set("this", out[0])
                node.set("expressions", out[1])
        else:
            for side, other in (("this", "expression"), ("expression", "this")):
                out = rewrite(node.args[side], [node.args[other]], node)
                if out is not None:
                    node.set(side, out[0])
                    node.set(other, out[1][0])
                    break
        changed = changed or out is not None
    return changed
