"""Structured logging and Prometheus metrics, the same for every service."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST as PROMETHEUS_CONTENT_TYPE  # noqa: F401
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extra ``fields=`` passed to a log call are merged in."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-5s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return line


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Send every logger to stderr in the chosen format (idempotent)."""
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access", "httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def log_fields(**fields: Any) -> dict[str, Any]:
    """``log.info("msg", extra=log_fields(id=…))`` attaches structured fields."""
    return {"fields": fields}


class ServiceMetrics:
    """A per-service registry with the request metrics every service exports.

    Services add their own with :meth:`counter` / :meth:`histogram`; names get the
    ``k3stack_<service>_`` prefix so one Prometheus can scrape all five.
    """

    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        self.requests = self.counter(
            "http_requests_total",
            "HTTP requests by route and status",
            ["method", "route", "status"],
        )
        self.latency = self.histogram(
            "http_request_seconds", "HTTP request latency", ["method", "route"]
        )

    def counter(self, name: str, doc: str, labels: list[str] | None = None) -> Counter:
        return Counter(f"k3stack_{self.service}_{name}", doc, labels or [], registry=self.registry)

    def histogram(self, name: str, doc: str, labels: list[str] | None = None) -> Histogram:
        return Histogram(
            f"k3stack_{self.service}_{name}", doc, labels or [], registry=self.registry
        )

    def observe_request(self, method: str, route: str, status: int, started: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(time.perf_counter() - started)

    def render(self) -> bytes:
        return generate_latest(self.registry)
