"""The SQL sandbox decides on one parse (issue 28 §1): polars runs only text generated from
the tree the sandbox checked (or, for a plain filter, the text polars itself read), in a
lexical form that no two SQL tokenizers read differently, and reaches no table function,
file or URL whatever the request's text.

Every case runs the whole query path (analysis, each piece's filter, the final SQL, the
split's plans) over an in-memory frame, with a local file and an HTTP server on loopback
as the bait: a refusal is typed, and neither bait is ever read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice import ForbiddenQueryError, QueryError
from s3slice.core.errors import contained
from s3slice.core.model import Query
from s3slice.query.analysis import collect
from s3slice.query.analyzer import analyze, split_for
from s3slice.query.polars import sql as polars_sql
from s3slice.query.split.plan import partial_step
from s3slice.query.sqlglot.sql import generated, parse_filter, parse_sql
from tests.sandbox_bait import SECRET, Bait

DATA = pl.DataFrame({"a": ["x", "y", "z"], "n": [1, 2, 3]})


@pytest.fixture(scope="module")
def bait(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bait]:
    b = Bait(tmp_path_factory.mktemp("bait"))
    yield b
    b.close()


def run(query: Query) -> pl.DataFrame | None:
    """The query over DATA as the engine runs it (per piece, then finish or the split);
    None when the query is refused (typed). As in the engine's execute phase, an error
    polars raises while planning (``WHERE a`` of a text column) becomes a QueryError."""
    try:
        with contained(lambda text: QueryError(f"polars failed running the query: {text}"),
                       native=(pl.exceptions.PolarsError,)):
            analysis = analyze(query)
            piece = analysis.prefilter(DATA.lazy())
            split = split_for(analysis)
            if split is not None:
                return collect(split.final([collect(partial_step(analysis, split, piece))]))
            return collect(analysis.finish(piece))
    except QueryError:
        return None


def assert_untouched(bait: Bait, out: pl.DataFrame | None) -> None:
    assert bait.hits == [], f"the query reached the HTTP server: {bait.hits}"
    if out is not None:
        assert SECRET not in str(out.to_dicts())


# Texts two SQL tokenizers read differently: sqlglot ends a ``--`` comment at \r, \v, \f
# and U+2028 (polars only at \n); dollar quotes, E'' and U&'' strings, nested comments,
# backslashes, MySQL's # comments, doubled and tripled quotes, quoted function names.
TEMPLATES = [
    "SELECT a FROM s3object WHERE a = 'x' --c{lb} OR a = '\nUNION ALL SELECT a FROM {p} --'",
    "SELECT a FROM s3object WHERE a = 'x' --c\r OR a = '\nUNION ALL SELECT a FROM "
    "read_parquet( --z\r' || (\n'{q}')",
    "SELECT a FROM s3object WHERE a = $$x' UNION ALL SELECT a FROM {p} --$$",
    "SELECT a FROM s3object WHERE a = $tag$x' UNION ALL SELECT a FROM {p} --$tag$",
    "SELECT a FROM s3object WHERE a = E'x\\' UNION ALL SELECT a FROM {p} --'",
    "SELECT a FROM s3object WHERE a = e'x\\' UNION ALL SELECT a FROM {p} --'",
    "SELECT a FROM s3object WHERE a = 'x\\' UNION ALL SELECT a FROM {p} --'",
    "SELECT a FROM s3object WHERE a = U&'x\\' UNION ALL SELECT a FROM {p} --'",
    "SELECT a FROM s3object /* /* */ UNION ALL SELECT a FROM {p} -- */",
    "SELECT a FROM s3object /* */ UNION ALL SELECT a FROM {p} /* */",
    "SELECT a FROM s3object /* /* */ */ UNION ALL SELECT a FROM {p}",
    "SELECT a FROM s3object WHERE a = 1 # ' UNION ALL SELECT a FROM {p} --'",
    "SELECT a FROM s3object WHERE a = '''' UNION ALL SELECT a FROM {p}",
    "SELECT \"a\\\" FROM s3object UNION ALL SELECT a FROM {p} --\"",
    "SELECT `a` FROM s3object UNION ALL SELECT a FROM {p}",
    "SELECT a FROM s3object; SELECT a FROM {p}",
    "SELECT a FROM {p}",
    "SELECT * FROM {p} AS s3object",
    "WITH t AS (SELECT a FROM {p}) SELECT a FROM s3object UNION ALL SELECT a FROM t",
    "SELECT a, (SELECT MAX(a) FROM {p}) AS b FROM s3object",
    "SELECT a FROM s3object WHERE a IN (SELECT a FROM {p})",
    "SELECT s.a FROM s3object s JOIN {p} AS t ON s.a = t.a",
    "SELECT a FROM s3object WHERE a = 'x' --{lb}UNION ALL SELECT a FROM {p}",
    "SELECT a FROM s3object WHERE a = 'x' /*{lb}*/ UNION ALL SELECT a FROM {p}",
    "SELECT a, COUNT(*) AS c FROM s3object WHERE a = 'x' --c{lb} OR a = '\nGROUP BY a "
    "UNION ALL SELECT a, 1 FROM {p} --'",
    "SELECT a FROM s3object WHERE a = 'x' --c{lb} OR a = '\nORDER BY a LIMIT 2 UNION ALL "
    "SELECT a FROM {p} --'",
]
LINE_BREAKS = ["\r", "\v", "\f", "\x85", "\u2028", "\u2029", "\r\n", "\x00"]
FILTERS = [
    "a = 'x' --c{lb} OR a IN (SELECT a FROM {p}) --",
    "a IN (SELECT a FROM {p})",
    "a = 'x' OR EXISTS (SELECT 1 FROM {p})",
    "a = 'x' --{lb}) UNION ALL SELECT a, n FROM {p} --",
    "a = $$x' OR a IN (SELECT a FROM {p}) --$$",
    "a = E'x\\' OR a IN (SELECT a FROM {p}) --'",
    "a = 'x' /* /* */ OR a IN (SELECT a FROM {p}) -- */",
    "{p} IS NOT NULL",
    "a = (SELECT MAX(a) FROM {p})",
]


def cases(templates: list[str]) -> list[str]:
    out: list[str] = []
    for t in templates:
        out.extend(t.replace("{lb}", lb) for lb in (LINE_BREAKS if "{lb}" in t else [""]))
    return out


@pytest.mark.parametrize("template", cases(TEMPLATES))
def test_sql_that_parsers_read_differently_never_reads_outside(bait: Bait,
                                                                template: str) -> None:
    for payload in bait.payloads():
        text = template.replace("{p}", payload).replace("{q}", bait.url)
        out = run(Query(sql=text))
        assert_untouched(bait, out)
        if out is not None:  # it ran: what ran was the checked tree's own text
            tree, _ = parse_sql(text)
            assert analyze(Query(sql=text)).sql == generated(tree)


@pytest.mark.parametrize("template", cases(FILTERS))
def test_filters_that_parsers_read_differently_never_read_outside(bait: Bait,
                                                                  template: str) -> None:
    for payload in bait.payloads():
        text = template.replace("{p}", payload)
        out = run(Query(filter=text))
        assert_untouched(bait, out)
        if out is not None:
            where = analyze(Query(filter=text)).where
            assert where is not None
            polars_sql.check_text(where, field="filter", expression=True)


def test_the_reported_request_is_refused_before_any_read(bait: Bait) -> None:
    text = ("SELECT a FROM s3object WHERE a = 'x' --c\r OR a = '\nUNION ALL SELECT a FROM "
            f"read_parquet( --z\r' || (\n'{bait.url}')")
    # sqlglot reads one SELECT comparing with a string that holds a \r: refused as text
    # polars could read otherwise, at analysis, before any byte is read.
    with pytest.raises(ForbiddenQueryError, match="U\\+000D"):
        analyze(Query(sql=text))
    assert_untouched(bait, None)


def test_what_runs_is_what_sqlglot_read() -> None:
    """sqlglot ends the comment at \r and reads ``a = 'x' OR a = 'y'``; polars, given
    the request's text, would read ``a = 'x'`` alone. The answer is sqlglot's."""
    text = "SELECT a FROM s3object WHERE a = 'x' --c\r OR a = 'y'"
    analysis = analyze(Query(sql=text))
    assert analysis.sql == "SELECT a FROM s3object WHERE a = 'x' OR a = 'y'"
    out = collect(analysis.finish(analysis.prefilter(DATA.lazy())))
    assert out["a"].to_list() == DATA.filter(pl.col("a").is_in(["x", "y"]))["a"].to_list()
    raw = pl.SQLContext(s3object=DATA).execute(text, eager=True)
    assert raw["a"].to_list() == ["x"]  # the request's own text meant otherwise to polars


@pytest.mark.parametrize("text", [
    "SELECT a FROM s3object -- c", "SELECT a FROM s3object /* c */", "SELECT a FROM x;",
    "SELECT $$a$$ FROM s3object", "SELECT E'a' FROM s3object", "SELECT N'a' FROM s3object",
    "SELECT U&'a' FROM s3object", "SELECT a FROM s3object WHERE a = '\r'",
    "SELECT a FROM s3object WHERE a = '\u2028'", "SELECT a\rFROM s3object",
    "SELECT a\u00a0FROM s3object", "SELECT a FROM s3object WHERE a = #x",
    "SELECT read_csv('f') FROM s3object", "SELECT * FROM READ_PARQUET ('f')",
    "SELECT * FROM \"read_ndjson\"\n('f')", "SELECT * FROM scan_csv('f')",
    "SELECT * FROM s3object WHERE a = 'x", "SELECT \\ FROM s3object", "SELECT `a` FROM t",
    "SELECT a FROM s3object WHERE a = ?", "SELECT a FROM s3object WHERE a = @x",
    "SELECT * FROM s3object, 1read_csv('f')", "SELECT * FROM 1e5scan_x ('f')",
])
def test_text_that_could_read_two_ways_is_refused(text: str) -> None:
    with pytest.raises(ForbiddenQueryError):
        polars_sql.check_text(text, field="sql")


@pytest.mark.parametrize("text", [
    "SELECT a, \"we\"\"ird\", 'it''s', '--', '/* */', 'a\\b', '$$', 'é\u200b\n\t' "
    "FROM s3object AS s WHERE a <> 1 AND b::INT >= -1 OR c || 'x' LIKE '%' ORDER BY 1",
    "SELECT read_count, scan_id, \"read_csv\" FROM s3object",  # names, not calls
    "SELECT été FROM s3object WHERE a IN (SELECT a FROM s3object)",
])
def test_text_in_the_one_lexical_form_is_accepted(text: str) -> None:
    polars_sql.check_text(text, field="sql")


def test_a_filter_may_not_hold_a_subquery() -> None:
    for text in ("a IN (SELECT a FROM t)", "a IN (VALUES (1))", "a IN (1select a FROM t)"):
        with pytest.raises(ForbiddenQueryError):
            polars_sql.check_text(text, field="filter", expression=True)
        with pytest.raises(QueryError):  # sqlglot's parse refuses it too
            parse_filter(text)


def test_polars_reads_the_lexical_form_as_the_check_does() -> None:
    """The check's model of polars' tokenizer: a backslash is no escape, a doubled quote
    is one quote, and a newline inside quotes is text. Fails if polars changes it."""
    got = pl.SQLContext(t=DATA.head(1)).execute(
        "SELECT 'x\\' AS b, 'it''s' AS c, 'l1\nl2' AS d, a AS \"we\"\"ird\" FROM t",
        eager=True)
    assert got.to_dicts() == [{"b": "x\\", "c": "it's", "d": "l1\nl2", 'we"ird': "x"}]


def test_a_plan_that_scans_anything_else_is_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: were the text check ever wrong, the resolved plan holds a scan
    that no registered frame has, and the query is refused before a row is read."""
    path = tmp_path / "other.csv"
    path.write_text(f"a,n\n{SECRET},1\n")
    monkeypatch.setattr(polars_sql, "check_text", lambda *a, **k: None)
    with pytest.raises(ForbiddenQueryError, match="other.csv"):
        polars_sql.execute(f"SELECT a FROM s3object UNION ALL SELECT a FROM read_csv('{path}')",
                           {"s3object": DATA.lazy()})
    # A registered frame that is itself a scan stays allowed.
    scanned = tmp_path / "mine.parquet"
    DATA.write_parquet(scanned)
    out = polars_sql.execute("SELECT a FROM s3object", {"s3object": pl.scan_parquet(scanned)})
    assert out.collect().equals(DATA.select("a"))


FRAGMENTS = ["SELECT", " a", " n", " FROM", " s3object", " WHERE", " =", " OR", " AND",
             " UNION ALL SELECT a FROM", " IN (SELECT a FROM", " GROUP BY a", " ORDER BY a",
             " LIMIT 2", "'", "''", "'x'", '"', '"a"', "--", "/*", "*/", "\r", "\n", "\v",
             "\f", "\x85", "\u2028", "\u2029", "$$", "$t$", "E'", "U&'", "\\", "#", ";",
             "`", "(", ")", ",", "||", " read_csv(", " read_parquet(", " ReAd_JsOn (",
             "{file}", "{url}", " COUNT(*)", " 1"]


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=18),
       as_filter=st.booleans())
def test_any_text_of_dangerous_fragments_is_refused_or_runs_its_checked_parse(
        bait: Bait, parts: list[str], as_filter: bool) -> None:
    text = "".join(parts).replace("{file}", f"'{bait.file}'").replace("{url}", f"'{bait.url}'")
    if not as_filter:
        text = "SELECT a FROM s3object WHERE " + text
    ran: list[str] = []
    real = polars_sql.execute

    def spy(sql: str, frames: dict[str, pl.LazyFrame], **kw: str) -> pl.LazyFrame:
        ran.append(sql)
        return real(sql, frames, **kw)

    query = Query(filter=text) if as_filter else Query(sql=text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(polars_sql, "execute", spy)
        for module in ("analysis", "split.plan"):
            mp.setattr(f"s3slice.query.{module}.execute", spy)
        out = run(query)
    assert_untouched(bait, out)
    if out is None:
        return
    analysis = analyze(query)
    for sql in ran:
        polars_sql.check_text(sql, field="sql")
    if as_filter:
        assert analysis.where is not None
        expected = {f'SELECT * FROM "__s3slice_piece" WHERE ({analysis.where})'}
        assert set(ran) == expected
        if analysis.where != text:  # not polars' own reading: sqlglot's, generated
            assert analysis.where == generated(parse_filter(text))
    else:
        tree, _ = parse_sql(text)
        assert analysis.sql == generated(tree)
        split = split_for(analysis)
        allowed = {analysis.sql, *(() if split is None else (split.partial_sql,
                                                             split.final_sql))}
        if analysis.where is not None:
            allowed.add(f'SELECT * FROM "__s3slice_piece" WHERE ({analysis.where})')
        assert set(ran) <= allowed


TEXT_IN_QUOTES = st.lists(st.sampled_from(
    ["'", '"', "\\", "-", "/", "*", "$", "#", ";", "`", "e", "E", "U", "&", " ", "\t", "\n",
     "é", "\u200b", "x", "(", ")", "read_csv", "--", "/*", "*/", "$$"]), max_size=12).map("".join)


@settings(max_examples=150, deadline=None)
@given(value=TEXT_IN_QUOTES)
def test_quoted_text_means_to_polars_what_the_check_reads(value: str) -> None:
    """Whatever a string literal or a quoted name holds (quotes doubled), polars reads the
    bounds the check reads: the value comes back whole, and nothing in it is a token. And
    a literal that sqlglot read comes back from the SQL generated from its tree."""
    literal = "'" + value.replace("'", "''") + "'"
    name = '"' + value.replace('"', '""') + '"'
    text = f"SELECT {literal} AS v, a AS {name} FROM s3object" if value else (
        f"SELECT {literal} AS v FROM s3object")
    polars_sql.check_text(text, field="sql")
    got = polars_sql.execute(text, {"s3object": DATA.head(1).lazy()}).collect()
    assert got["v"].to_list() == [value]
    if value:
        assert got.columns == ["v", value]
    out = run(Query(sql=f"SELECT {literal} AS v FROM s3object"))
    assert out is not None and out["v"].to_list() == [value] * DATA.height


DANGER = ["'", "''", '"', "\\", "--", "/*", "*/", "\r", "\n", "\v", "\f", "\x85", "\u2028",
          "$$", "E'", "#", ";", " UNION ALL SELECT a FROM ", " read_csv(", " read_parquet(",
          "{file}", "{url}", ")", "(", " OR a = ", "x"]
SEPARATORS = [" ", "\n", "\t", "\r", " --c{junk}{lb}", " /*{junk}*/ ", "/* /* */ {junk} */",
              " -- {junk}\n"]
LINE_ENDS = ["\n", "\r", "\r\n", "\v", "\f", "\x85", "\u2028", "\u2029"]
#: A query that runs, as tokens; a separator (space, or a comment holding dangerous text
#: and ending at one of the line characters) goes between each two.
SKELETONS = [["SELECT", "a", ",", "n", "FROM", "s3object", "WHERE", "a", "=", "{lit}", "OR",
              "n", ">", "1"],
             ["SELECT", "a", ",", "COUNT(*)", "AS", "c", "FROM", "s3object", "WHERE", "a",
              "<>", "{lit}", "GROUP", "BY", "a"],
             ["SELECT", "a", "FROM", "s3object", "WHERE", "a", "IN", "(", "{lit}", ",",
              "'y'", ")", "ORDER", "BY", "a", "LIMIT", "2"]]


@st.composite
def woven(draw: st.DrawFn) -> tuple[str, str]:
    """(sql, filter): a runnable query and a runnable condition, each with a separator
    from SEPARATORS (comments holding dangerous text) between every two tokens."""
    def junk() -> str:
        return "".join(draw(st.lists(st.sampled_from(DANGER), max_size=5)))

    def separator() -> str:
        sep = draw(st.sampled_from(SEPARATORS))
        return sep.replace("{junk}", junk()).replace("{lb}", draw(st.sampled_from(LINE_ENDS)))

    literal = "'" + junk().replace("'", "''") + "'"
    tokens = [t.replace("{lit}", literal) for t in draw(st.sampled_from(SKELETONS))]
    sql = "".join(t + separator() for t in tokens)
    where = tokens.index("WHERE")
    condition = "".join(t + separator() for t in tokens[where + 1:where + 4])
    return sql, condition


@settings(max_examples=120, deadline=None)
@given(case=woven(), as_filter=st.booleans())
def test_comments_woven_into_a_query_are_refused_or_run_as_checked(
        bait: Bait, case: tuple[str, str], as_filter: bool) -> None:
    """Runnable queries with comments (ending at \\r, \\v, U+2028 ...) and strings holding
    dangerous text between their tokens: refused, or what runs is the checked parse's own
    text (generated from sqlglot's tree, or polars' own plain filter), and no bait read."""
    sql, condition = case
    text = (condition if as_filter else sql).replace("{file}", f"'{bait.file}'").replace(
        "{url}", f"'{bait.url}'")
    query = Query(filter=text) if as_filter else Query(sql=text)
    out = run(query)
    assert_untouched(bait, out)
    if out is None:
        return
    analysis = analyze(query)
    if as_filter:
        assert analysis.where is not None
        polars_sql.check_text(analysis.where, field="filter", expression=True)
        assert analysis.where == text or analysis.where == generated(parse_filter(text))
        want = pl.SQLContext(s3object=DATA).execute(
            f"SELECT * FROM s3object WHERE {analysis.where}", eager=True)
    else:
        tree, _ = parse_sql(text)
        assert analysis.sql == generated(tree)
        want = pl.SQLContext(s3object=DATA).execute(analysis.sql, eager=True)
    assert out.sort(out.columns).equals(want.sort(want.columns))
