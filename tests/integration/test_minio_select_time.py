"""S3 Select's time functions against MinIO's: timestamps as S3 Select writes them (UTC,
offsets either side, minutes only, fractions, a date alone) in CSV and JSON lines,
compared, shifted, differenced, extracted and written. The harness and how MinIO is built
are in ``minio_select.py`` and ``test_minio_select.py``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration import minio_select
from tests.integration.minio_select import (
    SAME,
    Differs,
    Fails,
    Output,
    Rows,
    Source,
    compare,
)
from tests.support import S3Env

pytestmark = pytest.mark.integration

# The fixtures: MinIO, and the local S3 server, each holding the objects.
minio, local = minio_select.minio, minio_select.local


TS = "CAST(s.ts AS TIMESTAMP)"
UTC_DAY = "CAST('2025-05-01T00:00:00Z' AS TIMESTAMP)"
UNIMPLEMENTED = "MinIO has not implemented TO_TIMESTAMP and TO_STRING, which AWS documents"
TIME_CASES: list[tuple[str, Source, str, Output, Differs | None]] = []
for _src in ("times_csv", "times_json"):
    TIME_CASES += [
        (f"{_src}: compared with a Z literal", _src,
         f"SELECT s.id FROM S3Object s WHERE {TS} >= CAST('2024-05-01T10:30:00Z' AS TIMESTAMP)",
         "JSON", SAME),
        (f"{_src}: compared with an offset literal", _src,
         f"SELECT s.id FROM S3Object s WHERE {TS} < CAST('2024-06-15T00:00:00+02:00' AS "
         "TIMESTAMP)", "JSON", SAME),
        (f"{_src}: equal instants in other offsets", _src,
         f"SELECT s.id FROM S3Object s WHERE {TS} = CAST('2024-06-14T22:00:00Z' AS TIMESTAMP)",
         "JSON", SAME),
        (f"{_src}: utcnow relative", _src,
         f"SELECT s.id FROM S3Object s WHERE {TS} < UTCNOW() AND "
         f"DATE_ADD(year, 1, {TS}) < UTCNOW()", "JSON", SAME),
        (f"{_src}: date_add compared", _src,
         f"SELECT s.id FROM S3Object s WHERE DATE_ADD(hour, 3, {TS}) > "
         "CAST('2024-06-14T23:00:00Z' AS TIMESTAMP)", "JSON", SAME),
        (f"{_src}: date_add day and month compared", _src,
         f"SELECT s.id FROM S3Object s WHERE DATE_ADD(day, -1, {TS}) < "
         f"CAST('2024-01-01T00:00:00Z' AS TIMESTAMP) OR DATE_ADD(month, 1, {TS}) > "
         "CAST('2024-07-01T00:00:00Z' AS TIMESTAMP)", "JSON", SAME),
        (f"{_src}: date_diff elapsed", _src,
         f"SELECT DATE_DIFF(hour, {TS}, {UTC_DAY}) AS h, DATE_DIFF(minute, {TS}, {UTC_DAY}) "
         f"AS m, DATE_DIFF(second, {UTC_DAY}, {TS}) AS s, DATE_DIFF(day, {TS}, {UTC_DAY}) AS d "
         "FROM S3Object s", "JSON", SAME),
        (f"{_src}: date_diff whole years and calendar months", _src,
         f"SELECT DATE_DIFF(year, {TS}, {UTC_DAY}) AS y, DATE_DIFF(month, {TS}, {UTC_DAY}) "
         f"AS mo, DATE_DIFF(year, {UTC_DAY}, {TS}) AS ny FROM S3Object s "
         "WHERE s.id IN (1, 4, 5)", "JSON", SAME),
        (f"{_src}: extract over Z", _src,
         f"SELECT EXTRACT(YEAR FROM {TS}) AS y, EXTRACT(MONTH FROM {TS}) AS mo, "
         f"EXTRACT(DAY FROM {TS}) AS d, EXTRACT(HOUR FROM {TS}) AS h, "
         f"EXTRACT(MINUTE FROM {TS}) AS mi, EXTRACT(SECOND FROM {TS}) AS se, "
         f"EXTRACT(TIMEZONE_HOUR FROM {TS}) AS th, EXTRACT(TIMEZONE_MINUTE FROM {TS}) AS tm "
         "FROM S3Object s WHERE s.id IN (1, 4, 5)", "JSON", SAME),
        (f"{_src}: date_diff by calendar over offsets", _src,
         f"SELECT DATE_DIFF(year, {TS}, {UTC_DAY}) AS y, DATE_DIFF(month, {TS}, {UTC_DAY}) "
         "AS mo FROM S3Object s WHERE s.id IN (2, 3, 6)", "JSON", SAME),
        (f"{_src}: calendar date_diff over offsets either way", _src,
         f"SELECT DATE_DIFF(year, {UTC_DAY}, {TS}) AS ny, DATE_DIFF(month, {UTC_DAY}, {TS}) "
         f"AS nmo, DATE_DIFF(month, {TS}, CAST('2024-07-01T01:00:00+03:00' AS TIMESTAMP)) "
         "AS lmo FROM S3Object s", "JSON", SAME),
        (f"{_src}: extract over offsets", _src,
         f"SELECT EXTRACT(HOUR FROM {TS}) AS h, EXTRACT(DAY FROM {TS}) AS d, "
         f"EXTRACT(TIMEZONE_HOUR FROM {TS}) AS th, EXTRACT(TIMEZONE_MINUTE FROM {TS}) AS tm "
         "FROM S3Object s WHERE s.id IN (2, 3, 6)", "JSON", SAME),
        (f"{_src}: extract every part over offset literals", _src,
         "SELECT EXTRACT(YEAR FROM CAST('2024-01-01T00:30:00+02:00' AS TIMESTAMP)) AS y, "
         "EXTRACT(MONTH FROM CAST('2024-01-01T00:30:00+02:00' AS TIMESTAMP)) AS mo, "
         "EXTRACT(MINUTE FROM CAST('2023-12-31T23:15:45-05:30' AS TIMESTAMP)) AS mi, "
         "EXTRACT(SECOND FROM CAST('2023-12-31T23:15:45-05:30' AS TIMESTAMP)) AS se, "
         "EXTRACT(TIMEZONE_HOUR FROM CAST('2023-12-31T23:15:45-05:30' AS TIMESTAMP)) AS th, "
         "EXTRACT(TIMEZONE_MINUTE FROM CAST('2023-12-31T23:15:45-05:30' AS TIMESTAMP)) AS tm "
         "FROM S3Object s WHERE s.id = 1", "JSON", SAME),
        (f"{_src}: timestamps written", _src,
         f"SELECT DATE_ADD(day, 1, {TS}) AS t FROM S3Object s WHERE s.id IN (1, 2, 5)", "JSON",
         Differs("MinIO writes S3 Select's shortest form with the text's offset; s3slice "
                 "writes ISO 8601 to the second, the UTC wall time (no zone: no offset)",
                 ours=Rows([{"t": "2024-05-02T10:30:00"}, {"t": "2024-06-15T22:00:00"},
                            {"t": "2024-01-02T00:00:00"}]),
                 minio=Rows([{"t": "2024-05-02T10:30Z"}, {"t": "2024-06-16T00:00+02:00"},
                             {"t": "2024-01-02T"}]))),
        (f"{_src}: to_timestamp", _src,
         "SELECT s.id FROM S3Object s WHERE TO_TIMESTAMP(s.ts) >= "
         "TO_TIMESTAMP('2024-02-29T14:00:00+02:00')", "JSON", Differs(
             UNIMPLEMENTED, ours=Rows([{"id": i if _src == "times_csv" else int(i)}
                                       for i in ("1", "2", "4")]),
             minio=Fails("Function is not yet implemented"))),
        (f"{_src}: to_string", _src,
         "SELECT TO_STRING(TO_TIMESTAMP(s.ts), 'MMMM d, y h:mm a X') AS t FROM S3Object s "
         "WHERE s.id IN (1, 2, 6)", "JSON", Differs(
             UNIMPLEMENTED, ours=Rows([{"t": "May 1, 2024 10:30 AM Z"},
                                       {"t": "June 15, 2024 12:00 AM +02"},
                                       {"t": "June 15, 2020 8:45 AM +0530"}]),
             minio=Fails("Function is not yet implemented"))),
    ]


@pytest.mark.parametrize(("name", "source", "sql", "output", "expect"), TIME_CASES,
                         ids=[c[0] for c in TIME_CASES])
def test_s3slice_and_minio_on_time(minio: Any, local: S3Env, name: str, source: Source,
                                   sql: str, output: Output, expect: Differs | None) -> None:
    compare(minio, name, source, sql, output, expect)
