"""Where a table's files may be (:mod:`s3slice.iceberg.locations`): under its location,
the paths its properties declare, or a prefix the deployment allows; a folder is a whole
path segment, ``s3a://`` is ``s3://``, and ``.``/``..`` segments are never inside."""

from __future__ import annotations

import pytest

from s3slice.core.errors import AccessDeniedError, ConfigurationError
from s3slice.core.settings import Settings
from s3slice.iceberg import locations as L

PROPS = {"write.data.path": "s3a://data-bucket/t/", "write.metadata.path": "s3://meta/t",
         "write.object-storage.path": "s3://objects", "write.folder-storage.path": "",
         "other.path": "s3://not-declared/"}


def folders(*allowed: str) -> tuple[str, ...] | None:
    return L.roots("s3://wh/db/t", PROPS, allowed)


@pytest.mark.parametrize(("uri", "inside"), [
    ("s3://wh/db/t/data/a.parquet", True),
    ("s3a://wh/db/t/metadata/snap.avro", True),
    ("s3://data-bucket/t/x/y.parquet", True),
    ("s3://meta/t/m.avro", True),
    ("s3://objects/ab12/t/f.parquet", True),
    ("s3://wh/db/t2/data/a.parquet", False),  # a folder is a whole segment
    ("s3://wh/db/t", False),
    ("s3://wh/db/t/", False),
    ("s3://wh/db/t/../t2/a.parquet", False),
    ("s3://wh/db/t/./a.parquet", False),
    ("s3://not-declared/a.parquet", False),
    ("s3://other/a.parquet", False),
    ("https://wh/db/t/a.parquet", False),
])
def test_inside_only_what_the_table_declares(uri: str, inside: bool) -> None:
    found = folders()
    assert found is not None and L.inside(uri, found) is inside
    if inside:
        L.check(uri, found, "data file", "s3://wh/db/t/metadata/v1.metadata.json")
    else:
        with pytest.raises(AccessDeniedError) as info:
            L.check(uri, found, "data file", "s3://wh/db/t/metadata/v1.metadata.json")
        assert info.value.uri == uri and L.SETTING in str(info.value)


def test_the_setting_allows_more_or_anything() -> None:
    more = folders("s3://other/")
    assert more is not None and L.inside("s3://other/a.parquet", more)
    assert folders("*") is None
    L.check("s3://anywhere/x", None, "data file", "t")


def test_the_setting_is_read_from_the_environment() -> None:
    settings = Settings.from_env({L.SETTING: " s3://a/b/, s3://c ,"})
    assert settings.iceberg_locations == ("s3://a/b/", "s3://c")
    assert Settings.from_env({}).iceberg_locations == ()
    for bad in ("a/b", "s3://", "gs://x/y"):
        with pytest.raises(ConfigurationError, match=L.SETTING):
            Settings.from_env({L.SETTING: bad})
