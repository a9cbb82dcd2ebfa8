"""Per-request latency histograms of the model service, on the service's Prometheus registry.

Time to first token, inter-token latency and end-to-end latency are what serving dashboards
(vLLM's, SGLang's) chart; queue time separates waiting for admission from decoding. The gauges
(running, waiting, cache usage, pool pages and state slots) are read from the engine at scrape time (:mod:`services.model.app`).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

#: The memory readings on /health and /metrics (``k3stack_model_engine_<key>``), from the runner.
MEMORY_METRICS = {
    "pool_pages": "Pages of the KV pool (MLA latent KV; the KDA state is in slots beside it).",
    "pool_pages_used": "Pool pages referenced by running requests or the prefix cache.",
    "state_slots": "KDA state slots: one per request the engine can run at once.",
    "state_slots_used": "KDA state slots held by running requests.",
}

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_INTER_TOKEN = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5, 5)


@dataclass
class RequestMetrics:
    ttft: Histogram
    inter_token: Histogram
    e2e: Histogram
    queue_time: Histogram
    finished: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> RequestMetrics:
        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, buckets=buckets, registry=registry)

        return cls(
            ttft=hist(
                "k3stack_model_time_to_first_token_seconds",
                "From submission to the first generated token.",
                _LATENCY,
            ),
            inter_token=hist(
                "k3stack_model_inter_token_latency_seconds",
                "Between consecutive generated tokens of one request.",
                _INTER_TOKEN,
            ),
            e2e=hist(
                "k3stack_model_e2e_request_latency_seconds",
                "From submission to the last token.",
                _LATENCY,
            ),
            queue_time=hist(
                "k3stack_model_queue_time_seconds",
                "From submission to admission into the running batch.",
                _LATENCY,
            ),
            finished=Counter(
                "k3stack_model_requests_finished",
                "Finished generations by finish reason (stop, length, abort, error).",
                ["reason"],
                registry=registry,
            ),
        )
