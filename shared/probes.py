"""Readiness checks every service shares: its Celery broker and its object store answer.

A service whose broker is down cannot queue work, one whose object store is down cannot keep
results: either way /health/ready must say 503 so a load balancer (and Compose's ``--wait``)
stops sending it requests. Each probe is one short round trip with a 2 s bound, no retries (the
prober retries); embedded stores (SQLite broker, a local folder) are part of the process and
always answer. Errors never carry the URL's password.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from shared.settings import Settings

PROBE_TIMEOUT_S = 2.0


class ProbeFailed(RuntimeError):
    """A dependency did not answer; the message names it, never its credentials."""


def _redacted(exc: BaseException, url: str) -> str:
    text = f"{type(exc).__name__}: {exc}"
    password = urlsplit(url).password
    return text.replace(password, "***") if password else text


def broker_check(settings: Settings) -> Callable[[], dict[str, Any]]:
    url = settings.broker_url or ""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""

    def check() -> dict[str, Any]:
        try:
            if scheme in ("redis", "rediss"):
                import redis

                client = redis.Redis.from_url(
                    url, socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S
                )
                try:
                    client.ping()
                finally:
                    client.close()
            elif scheme in ("amqp", "amqps", "pyamqp"):
                from kombu import Connection

                with Connection(url, connect_timeout=PROBE_TIMEOUT_S) as conn:
                    conn.ensure_connection(max_retries=1, timeout=PROBE_TIMEOUT_S)
            else:
                return {"kind": "embedded"}  # sqla+sqlite://, memory://: in this process
        except Exception as exc:  # noqa: BLE001 - any failure is "not ready", named
            raise ProbeFailed(f"broker unreachable: {_redacted(exc, url)}") from None
        return {"kind": scheme}

    return check


def object_store_check(settings: Settings) -> Callable[[], dict[str, Any]]:
    url = settings.object_store_url or ""
    parts = urlsplit(url)

    def check() -> dict[str, Any]:
        if parts.scheme not in ("http", "https"):
            return {"kind": "local"}  # file://: a folder of this container
        import urllib3
        from minio import Minio

        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=PROBE_TIMEOUT_S, read=PROBE_TIMEOUT_S),
            retries=urllib3.Retry(total=0),
        )
        try:
            client = Minio(
                parts.netloc,
                access_key=settings.object_store_access_key or None,
                secret_key=settings.object_store_secret_key or None,
                secure=parts.scheme == "https",
                region=settings.object_store_region,
                http_client=http,
            )
            found = client.bucket_exists(settings.object_store_bucket)
        except Exception as exc:  # noqa: BLE001
            raise ProbeFailed(f"object store unreachable: {_redacted(exc, url)}") from None
        finally:
            http.clear()
        if not found:
            raise ProbeFailed(f"object store bucket {settings.object_store_bucket!r} is missing")
        return {"kind": "s3", "bucket": settings.object_store_bucket}

    return check
