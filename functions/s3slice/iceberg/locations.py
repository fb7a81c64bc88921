"""Where a table's files may be: only what its metadata names as its own. A manifest
list, manifest, data file or delete file is read only under the table's ``location`` or a
path its properties declare for its files (``write.data.path``, ``write.metadata.path``,
and the older ``write.object-storage.path`` and ``write.folder-storage.path`` that Java's
location providers still honour), or under a prefix the deployment allows besides
(``S3SLICE_ICEBERG_ALLOWED_LOCATIONS``: :class:`s3slice.core.settings.Settings`). Anything
else is an :class:`AccessDeniedError` naming the file: metadata that points elsewhere
(another bucket, another table's prefix) is not followed, beside IAM."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from s3slice.core.errors import AccessDeniedError

#: Table properties that declare where a table writes its files.
PATH_PROPERTIES = ("write.data.path", "write.metadata.path", "write.object-storage.path",
                   "write.folder-storage.path")
#: The setting that allows more (``*``: any location).
SETTING = "S3SLICE_ICEBERG_ALLOWED_LOCATIONS"
ANY = "*"
_SCHEMES = ("s3a://", "s3n://")


def _normal(uri: str) -> str:
    for scheme in _SCHEMES:
        if uri.startswith(scheme):
            return "s3://" + uri[len(scheme):]
    return uri


def _root(uri: str) -> str | None:
    """A prefix as a folder (``s3://b/t/``); None when it names no bucket."""
    uri = _normal(uri.strip())
    if not uri.startswith("s3://") or not uri[5:].partition("/")[0]:
        return None
    return uri.rstrip("/") + "/"


def roots(location: str, properties: Mapping[str, str], allowed: Sequence[str]
          ) -> tuple[str, ...] | None:
    """The folders a table's files may be in; None when any location is allowed."""
    if ANY in allowed:
        return None
    declared = [location, *(properties.get(p) or "" for p in PATH_PROPERTIES), *allowed]
    return tuple(r for d in declared if d and (r := _root(d)) is not None)


def inside(uri: str, folders: Iterable[str]) -> bool:
    normal = _normal(uri)
    key = normal[5:].partition("/")[2]
    if any(part in (".", "..") for part in key.split("/")):
        return False  # a client may resolve these to another key
    return any(normal.startswith(f) and len(normal) > len(f) for f in folders)


def check(uri: str, folders: tuple[str, ...] | None, what: str, table: str) -> None:
    """Refuses ``uri`` (the table's ``what``) when it is outside ``folders``."""
    if folders is None or inside(uri, folders):
        return
    shown = ", ".join(folders) or "none"
    raise AccessDeniedError(
        f"the {what} is outside the table's location and the paths its properties declare "
        f"({shown}) of {table}; nothing was read (a deployment may allow more with "
        f"{SETTING})", uri=uri)
