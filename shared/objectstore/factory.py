"""Choosing the backend from ``K3STACK_OBJECT_STORE_URL`` (``file://`` or ``http(s)://``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from shared.objectstore.base import ObjectStore
from shared.objectstore.local import LocalObjectStore
from shared.objectstore.s3 import S3ObjectStore

if TYPE_CHECKING:
    from shared.settings import Settings


def make_object_store(settings: Settings, **kwargs: Any) -> ObjectStore:
    """The store ``K3STACK_OBJECT_STORE_URL`` names: ``file://<dir>`` or ``http(s)://host:port``.

    Extra keyword arguments go to the backend's constructor.
    """
    from shared.settings import SettingsError

    url = settings.object_store_url or f"file://{settings.data_dir / 'objects'}"
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "file":
        path = unquote(url[len("file://") :])
        if not path:
            raise SettingsError(f"K3STACK_OBJECT_STORE_URL: file:// URL names no folder: {url!r}")
        return LocalObjectStore(Path(path).expanduser(), **kwargs)
    if scheme in ("http", "https"):
        if urlsplit(url).path not in ("", "/"):
            raise SettingsError(
                f"K3STACK_OBJECT_STORE_URL: {url!r} must be http(s)://host:port without a path; "
                "set the bucket with K3STACK_OBJECT_STORE_BUCKET"
            )
        return S3ObjectStore(
            url,
            access_key=settings.object_store_access_key,
            secret_key=settings.object_store_secret_key,
            bucket=settings.object_store_bucket,
            region=settings.object_store_region,
            **kwargs,
        )
    raise SettingsError(
        f"K3STACK_OBJECT_STORE_URL: unsupported object store URL {url!r}; "
        "use file://<dir> for a local folder or http(s)://host:port for an S3 server"
    )
