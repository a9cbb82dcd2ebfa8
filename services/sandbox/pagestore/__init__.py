"""Incremental checkpoint pages: hashing (``hashing``) and content-addressed storage (``store``)."""

from services.sandbox.pagestore.hashing import (
    PAGE_SIZE,
    file_page_hashes,
    gather_pages,
    naive_page_hashes,
    page_hashes,
)
from services.sandbox.pagestore.store import LayerStats, PageMap, PageStore

__all__ = [
    "PAGE_SIZE",
    "LayerStats",
    "PageMap",
    "PageStore",
    "file_page_hashes",
    "gather_pages",
    "naive_page_hashes",
    "page_hashes",
]
