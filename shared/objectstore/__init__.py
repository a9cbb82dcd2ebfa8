"""Object storage behind one interface: a local directory, or an S3 server (MinIO) by URL.

``make_object_store(settings)`` picks the backend from ``K3STACK_OBJECT_STORE_URL``:
``file://<dir>`` (the embedded default, ``<data_dir>/objects``) or ``http(s)://host:port`` for an
S3 server reached with the ``minio`` SDK. Both backends behave the same, which
``tests/shared/test_objectstore.py`` checks by running one suite over both:

* keys are ``/``-separated relative paths (``trajectories/ep-1/body.json``); a bad key raises
  :class:`ValueError` before any I/O;
* ``put`` takes bytes, a binary file or an iterable of byte chunks, of known or unknown length,
  and never holds a whole stream in memory; ``open`` streams back in chunks;
* a missing key raises :class:`NotFound` (a :class:`KeyError`); ``delete`` of a missing key is a
  no-op; ``list`` is recursive and sorted by key;
* ``put_content_addressed`` stores data under ``<prefix><sha256 hex>`` and skips the upload when
  that key already exists (sandbox checkpoints store memory pages this way);
  ``put_many_content_addressed`` does the same for many objects at once.

Differences the interface cannot hide: the local backend keeps no content type (``stat`` reports
``None``) and its etag is ``<mtime_ns>-<size>`` in hex, not a digest; S3 keeps the content's
sha256 in object metadata when the length was known up front. A local key cannot also be a
"folder" of other keys (``a`` and ``a/b`` together), which S3 allows; such a put raises
:class:`ValueError`.

The package: ``base`` (the interface, keys, streams), ``local`` and ``s3`` (the backends) and
``factory`` (:func:`make_object_store`); import them all from ``shared.objectstore``.
"""

from __future__ import annotations

from shared.objectstore.base import (
    CHUNK_SIZE,
    DEFAULT_CONTENT_TYPE,
    MAX_KEY_BYTES,
    Data,
    NotFound,
    ObjectInfo,
    ObjectReader,
    ObjectStore,
    ObjectStoreError,
    validate_key,
)
from shared.objectstore.factory import make_object_store
from shared.objectstore.local import LocalObjectStore
from shared.objectstore.s3 import S3ObjectStore

__all__ = [
    "CHUNK_SIZE",
    "DEFAULT_CONTENT_TYPE",
    "Data",
    "LocalObjectStore",
    "MAX_KEY_BYTES",
    "NotFound",
    "ObjectInfo",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreError",
    "S3ObjectStore",
    "make_object_store",
    "validate_key",
]
