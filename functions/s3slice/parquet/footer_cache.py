"""Footers kept across warm invocations, by object and ETag, within a byte bound."""

from __future__ import annotations

import collections
import threading

from s3slice.core.model import ObjectRef
from s3slice.parquet.footer import Footer


class FooterCache:
    """Parsed footers across warm invocations, keyed by (bucket, key, ETag), bounded in bytes.

    The newest ETag seen of each key is remembered with it, so a read that knows no ETag
    (a direct invoke) can ask S3 whether the object is still that one (a suffix GET with
    ``If-None-Match``: no bytes when it is) instead of parsing its footer again.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: collections.OrderedDict[tuple[str, str, str], Footer] = (
            collections.OrderedDict())
        self._newest: dict[tuple[str, str], str] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    def _evict(self) -> None:
        while self._bytes > self.max_bytes:
            (bucket, key, etag), old = self._items.popitem(last=False)
            self._bytes -= old.nbytes
            if self._newest.get((bucket, key)) == etag:
                del self._newest[(bucket, key)]

    def newest(self, obj: ObjectRef) -> tuple[str, Footer] | None:
        """The newest ETag cached for ``obj``'s key, and its footer."""
        with self._lock:
            etag = self._newest.get((obj.bucket, obj.key))
            footer = None if etag is None else self._items.get((obj.bucket, obj.key, etag))
        return None if etag is None or footer is None else (etag, footer)

    def get(self, obj: ObjectRef, etag: str | None) -> Footer | None:
        if not etag:
            return None
        with self._lock:
            footer = self._items.get((obj.bucket, obj.key, etag))
            if footer is not None:
                self._items.move_to_end((obj.bucket, obj.key, etag))
                self.hits += 1
            return footer

    def put(self, obj: ObjectRef, etag: str | None, footer: Footer) -> None:
        if not etag or footer.nbytes > self.max_bytes:
            return
        key = (obj.bucket, obj.key, etag)
        with self._lock:
            self._newest[(obj.bucket, obj.key)] = etag
            if key in self._items:
                return
            self._items[key] = footer
            self._bytes += footer.nbytes
            self._evict()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._newest.clear()
            self._bytes = 0


#: The process's footer cache, sized by ``S3SLICE_FOOTER_CACHE_MB`` when an engine is made.
FOOTER_CACHE = FooterCache(64 * 1024 * 1024)
