"""Incremental checkpoint pages: hashing (``hashing``) and content-addressed storage (``store``)."""

from services.sandbox.pagestore.hashing import (
    PAGE_SIZE,
    file_page_hashes,
    gather_pages,
    naive_page_hashes,
    page_hashes,
)
from services.sandbox.pagestore.store import (
    LayerStats,
    PageMap,
    PageStore,
    PageStores,
    write_sparse_file,
)

__all__ = [
    "PAGE_SIZE",
    "LayerStats",
    "PageMap",
    "PageStore",
    "PageStores",
    "file_page_hashes",
    "gather_pages",
    "naive_page_hashes",
    "page_hashes",
    "write_sparse_file",
]
