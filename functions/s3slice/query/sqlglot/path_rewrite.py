"""Finding S3 Select path expressions (``s.b.c``, ``s.tags[0]``) in a parsed query and
rewriting each into the column :class:`~s3slice.query.paths.Path` computes it into.
"""

from __future__ import annotations

from sqlglot import exp

from s3slice.core.errors import FilterSyntaxError
from s3slice.query.analysis import SOURCE_TABLE
from s3slice.query.paths import PATH_PREFIX, Path
from s3slice.query.sqlglot.dialect import literal


def path_of(node: exp.Expr, qualifiers: set[str]) -> tuple[str, tuple[str | int, ...]] | None:
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
        inner = path_of(node.this, qualifiers)
        if inner is None or not isinstance(node.expression, exp.Identifier):
            return None
        return inner[0], (*inner[1], node.expression.name)
    if isinstance(node, exp.Bracket):
        inner = path_of(node.this, qualifiers)
        if inner is None:
            return None
        index = node.expressions[0] if len(node.expressions) == 1 else None
        ok, value = literal(index) if index is not None else (False, None)
        if ok and isinstance(value, str) and isinstance(index, exp.Literal):
            return inner[0], (*inner[1], value)  # s.b['c'] is s.b.c
        if not ok or not isinstance(value, int) or isinstance(value, bool):
            raise FilterSyntaxError(f"{node.sql()}: an index must be a whole-number literal "
                                    "(0 is the first element) or a quoted attribute name")
        return inner[0], (*inner[1], value)
    return None


class PathRewriter:
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
            found = path_of(node, self.qualifiers)
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


def qualifiers_of(tree: exp.Expr) -> set[str]:
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


def column_names(tree: exp.Expr) -> set[str]:
    """The columns a (rewritten) tree names: plain columns, and the roots of its paths."""
    return {c.name for c in tree.find_all(exp.Column)
            if not isinstance(c.this, exp.Star) and not c.name.startswith(PATH_PREFIX)}
