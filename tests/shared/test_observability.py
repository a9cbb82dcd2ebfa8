from __future__ import annotations

import json
import logging

from shared.observability import ServiceMetrics, configure_logging, log_fields


def test_json_logs_are_one_object_per_line_with_fields(capsys):
    configure_logging("INFO", "json")
    logging.getLogger("k3stack.test").info("sandbox paused", extra=log_fields(sandbox="sb1", ms=12))
    logging.getLogger("k3stack.test").debug("not shown at INFO")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["msg"] == "sandbox paused" and doc["level"] == "INFO"
    assert doc["sandbox"] == "sb1" and doc["ms"] == 12
    configure_logging("INFO", "text")


def test_text_logs_append_fields(capsys):
    configure_logging("INFO", "text")
    logging.getLogger("k3stack.test").warning("slow", extra=log_fields(route="/x"))
    err = capsys.readouterr().err
    assert "WARNING k3stack.test: slow route=/x" in err


def test_service_metrics_are_prefixed_and_private():
    a, b = ServiceMetrics("model"), ServiceMetrics("model")
    tokens = a.counter("tokens_total", "generated tokens")
    tokens.inc(5)
    assert b"k3stack_model_tokens_total 5.0" in a.render()
    assert b"tokens_total" not in b.render()  # registries do not leak across apps
