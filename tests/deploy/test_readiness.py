"""Liveness and readiness are separate probes: with its PostgreSQL stopped, a service stays live
(no restart loop) but answers 503 on /health/ready, so Kubernetes stops routing to it; when the
database is back, it is ready again.

The database is this machine's real PostgreSQL, reached through a TCP relay the test owns, so
"stopping the database" (closing the relay and every connection through it) touches nothing
another test uses.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from shared.auth import service_key
from shared.db import make_engine
from shared.settings import get_settings
from tests.helpers.servers import LOOPBACK, free_port

PG_HOST, PG_PORT = "127.0.0.1", 5432
PG_ADMIN = f"postgresql+psycopg://postgres@{PG_HOST}:{PG_PORT}/postgres"


class Relay:
    """A TCP relay from a loopback port to PostgreSQL that can be stopped and started again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            if self._listener is not None:
                # shutdown() first: close() alone leaves a thread blocked in accept() holding
                # the socket open, still listening, so new connections would get through.
                with _quiet():
                    self._listener.shutdown(socket.SHUT_RDWR)
                self._listener.close()
                self._listener = None
            for conn in self._conns:
                with _quiet():
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((PG_HOST, PG_PORT), timeout=30)
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with _quiet():
            while data := src.recv(65536):
                dst.sendall(data)
        with _quiet():
            dst.shutdown(socket.SHUT_WR)


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)  # type: ignore[arg-type]


@pytest.fixture
def relayed_db() -> Iterator[tuple[Relay, str]]:
    admin = make_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    name = f"k3ready_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"PostgreSQL at {PG_HOST}:{PG_PORT} is required for this test: {exc}")
    relay = Relay(free_port())
    relay.start()
    try:
        yield relay, f"postgresql+psycopg://postgres@{LOOPBACK}:{relay.port}/{name}"
    finally:
        relay.stop()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_readiness_follows_the_database(
    relayed_db: tuple[Relay, str], clean_k3stack_env: pytest.MonkeyPatch
) -> None:
    relay, url = relayed_db
    clean_k3stack_env.setenv("K3STACK_DATABASE_URL", url)
    get_settings.cache_clear()
    from services.tools.app import create_app

    try:
        with TestClient(create_app()) as client:
            ready = client.get("/health/ready")
            assert ready.status_code == 200, ready.text
            assert ready.json()["checks"]["database"]["dialect"] == "postgresql"

            key = {"X-API-Key": service_key(get_settings(), "tools")}
            assert client.get("/worlds", headers=key).status_code == 200

            relay.stop()  # the database goes away
            down = client.get("/health/ready")
            assert down.status_code == 503
            assert down.json()["status"] == "degraded"
            assert "error" in down.json()["checks"]["database"]
            # the API says the outage is the platform's, and when to come back: 503, not 500
            outage = client.get("/worlds", headers=key)
            assert outage.status_code == 503, outage.text
            assert outage.json()["error_code"] == "store_unavailable"
            assert int(outage.headers["Retry-After"]) > 0
            live = client.get("/health/live")
            assert live.status_code == 200 and live.json()["status"] == "ok"

            relay.start()  # and comes back
            assert client.get("/health/ready").status_code == 200
    finally:
        get_settings.cache_clear()


def test_readiness_follows_the_broker_and_the_object_store(
    clean_k3stack_env: pytest.MonkeyPatch, tmp_path
) -> None:
    """A real redis-server as the broker and a moto S3 server as the object store, each killed
    while the service runs: /health/ready turns 503 naming the one that went, 200 again after."""
    from tests.helpers.servers import moto_server, redis_server

    with redis_server() as redis, moto_server() as s3:
        clean_k3stack_env.setenv("K3STACK_DATABASE_URL", f"sqlite:///{tmp_path}/tools.db")
        clean_k3stack_env.setenv("K3STACK_BROKER_URL", f"{redis.url}/0")
        clean_k3stack_env.setenv("K3STACK_RESULT_BACKEND", f"{redis.url}/1")
        clean_k3stack_env.setenv("K3STACK_OBJECT_STORE_URL", s3.url)
        clean_k3stack_env.setenv("K3STACK_OBJECT_STORE_ACCESS_KEY", "ready-test")
        clean_k3stack_env.setenv("K3STACK_OBJECT_STORE_SECRET_KEY", "ready-test-secret")
        get_settings.cache_clear()
        from services.tools.app import create_app
        from shared.objectstore import make_object_store

        make_object_store(get_settings())  # creates the bucket, as a deployment's init does
        try:
            with TestClient(create_app()) as client:
                ready = client.get("/health/ready")
                assert ready.status_code == 200, ready.text
                checks = ready.json()["checks"]
                assert checks["broker"] == {"kind": "redis"}
                assert checks["object_store"]["kind"] == "s3"

                redis.stop()  # redis-server stopped (its process group, SIGTERM)
                down = client.get("/health/ready")
                assert down.status_code == 503, down.text
                assert "broker unreachable" in down.json()["checks"]["broker"]["error"]
                assert "error" not in down.json()["checks"]["object_store"]
                assert client.get("/health/live").status_code == 200

                s3.stop()
                both = client.get("/health/ready").json()["checks"]
                assert "object store unreachable" in both["object_store"]["error"]
        finally:
            get_settings.cache_clear()


def test_a_missing_bucket_is_not_ready(clean_k3stack_env: pytest.MonkeyPatch) -> None:
    from shared.probes import ProbeFailed, object_store_check
    from shared.settings import load_settings
    from tests.helpers.servers import moto_server

    with moto_server() as s3:
        clean_k3stack_env.setenv("K3STACK_OBJECT_STORE_URL", s3.url)
        clean_k3stack_env.setenv("K3STACK_OBJECT_STORE_BUCKET", "never-made")
        with pytest.raises(ProbeFailed, match="bucket 'never-made' is missing"):
            object_store_check(load_settings())()
