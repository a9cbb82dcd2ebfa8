"""The soak's HTML page: one self-contained file, plots as inline SVG (no plotting library), a
table of outcomes per kind of work, the faults injected and every violation found."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Sample:
    """One look at the platform, every few seconds."""

    t: float  # seconds since the soak started
    load1: float
    in_flight: int
    rss_mib: dict[str, float]  # per service (its API and workers together)
    health_ms: dict[str, float]  # per service: one GET /health/live


@dataclass
class Run:
    """One piece of work and how it ended."""

    kind: str  # episode, sandbox, kernel, world, rollout
    label: str
    started: float
    ended: float = 0.0
    verdict: str = ""  # full | named:<outcome> | BELOW_FULL | error:<what>
    detail: str = ""


@dataclass
class SoakResult:
    minutes: float
    concurrency: int
    runs: list[Run] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    faults: list[tuple[float, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]


def _plot(title: str, series: dict[str, list[tuple[float, float]]], unit: str,
          faults: Sequence[tuple[float, str]] = ()) -> str:  # fmt: skip
    """A line plot: one polyline per series, fault times as dashed verticals."""
    w, h, pad = 640, 200, 40
    points = [p for s in series.values() for p in s]
    if not points:
        return f"<h3>{html.escape(title)}</h3><p>no data</p>"
    tmax = max(max(t for t, _ in points), 1.0)
    vmax = max(max(v for _, v in points), 1e-9) * 1.1

    def xy(t: float, v: float) -> str:
        return f"{pad + (w - 2 * pad) * t / tmax:.1f},{h - pad - (h - 2 * pad) * v / vmax:.1f}"

    parts = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">',
             f'<rect x="{pad}" y="{pad}" width="{w - 2 * pad}" height="{h - 2 * pad}" '
             'fill="none" stroke="#ccc"/>',
             f'<text x="{pad}" y="{pad - 6}" font-size="11">{vmax:.1f} {unit}</text>',
             f'<text x="{w - pad}" y="{h - pad + 14}" font-size="11" text-anchor="end">'
             f"{tmax / 60:.1f} min</text>"]  # fmt: skip
    for t, what in faults:
        x = pad + (w - 2 * pad) * t / tmax
        parts.append(f'<line x1="{x:.1f}" y1="{pad}" x2="{x:.1f}" y2="{h - pad}" '
                     f'stroke="#999" stroke-dasharray="3,3"><title>{html.escape(what)}</title></line>')  # fmt: skip
    for i, (name, pts) in enumerate(sorted(series.items())):
        colour = COLOURS[i % len(COLOURS)]
        line = " ".join(xy(t, v) for t, v in pts)
        parts.append(f'<polyline fill="none" stroke="{colour}" points="{line}"/>')
        parts.append(f'<text x="{w - pad + 4}" y="{pad + 12 * (i + 1)}" font-size="10" '
                     f'fill="{colour}">{html.escape(name)}</text>')  # fmt: skip
    parts.append("</svg>")
    return f"<h3>{html.escape(title)}</h3>" + "".join(parts)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def outcome_table(runs: Sequence[Run]) -> list[tuple[str, int, int, int, int, int]]:
    """(kind, runs, full, named failures, below full, errors) per kind of work."""
    rows = []
    for kind in sorted({r.kind for r in runs}):
        mine = [r for r in runs if r.kind == kind and r.verdict]
        c = Counter(r.verdict.split(":")[0] for r in mine)
        rows.append((kind, len(mine), c["full"], c["named"], c["BELOW_FULL"], c["error"]))
    return rows


def write_report(result: SoakResult, path: Path) -> None:
    s = result.samples
    services = sorted({k for x in s for k in x.rss_mib})
    plots = [
        _plot("runs in flight", {"in flight": [(x.t, x.in_flight) for x in s]}, "runs",
              result.faults),
        _plot("load average (1 min)", {"load": [(x.t, x.load1) for x in s]}, "", result.faults),
        _plot("RSS per service", {n: [(x.t, x.rss_mib.get(n, 0.0)) for x in s] for n in services},
              "MiB", result.faults),
        _plot("GET /health/live latency", {n: [(x.t, x.health_ms.get(n, 0.0)) for x in s]
                                          for n in services}, "ms", result.faults),
    ]  # fmt: skip
    ended = [r for r in result.runs if r.verdict]
    done_t = sorted(r.ended for r in ended)
    plots.insert(1, _plot("runs ended (cumulative)",
                          {"ended": [(t, i + 1) for i, t in enumerate(done_t)]}, "runs"))  # fmt: skip
    rows = "".join(
        f"<tr><td>{k}</td><td>{n}</td><td>{f}</td><td>{nf}</td><td>{b}</td><td>{e}</td></tr>"
        for k, n, f, nf, b, e in outcome_table(result.runs)
    )
    lat = "".join(
        f"<tr><td>{html.escape(n)}</td><td>{percentile([x.health_ms[n] for x in s if n in x.health_ms], 0.5):.0f}</td>"
        f"<td>{percentile([x.health_ms[n] for x in s if n in x.health_ms], 0.99):.0f}</td></tr>"
        for n in services
    )
    named = Counter(r.verdict for r in ended if not r.verdict.startswith("full"))
    named_rows = "".join(f"<li>{html.escape(v)}: {c}</li>" for v, c in named.most_common())
    faults = "".join(f"<li>{t / 60:.1f} min: {html.escape(w)}</li>" for t, w in result.faults)
    verdict = (
        "<p style='color:#2ca02c'><b>PASS</b>: no violation</p>"
        if not result.violations
        else "<p style='color:#d62728'><b>FAIL</b></p><ul>"
        + "".join(f"<li>{html.escape(v)}</li>" for v in result.violations)
        + "</ul>"
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>k3stack soak</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:60em}}td,th{{padding:2px 8px;
border-bottom:1px solid #eee;text-align:left}}</style></head><body>
<h1>k3stack soak: {result.minutes:g} min, concurrency {result.concurrency}</h1>{verdict}
<h2>Outcomes</h2><table><tr><th>kind</th><th>runs</th><th>full score</th>
<th>named failure</th><th>below full, not named</th><th>error</th></tr>{rows}</table>
<ul>{named_rows}</ul>
<h2>Faults injected</h2><ul>{faults or "<li>none</li>"}</ul>
<h2>Latency (GET /health/live, ms)</h2><table><tr><th>service</th><th>p50</th><th>p99</th></tr>
{lat}</table>
<h2>Over time</h2>{"".join(plots)}</body></html>"""
    path.write_text(page)
