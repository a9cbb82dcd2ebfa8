"""The README is a front door: short, and every page it sends a reader to exists, with one page
per service under docs/ (the configuration page's freshness is tests/shared/test_settings.py's)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("model", "sandbox", "tools", "verifier", "orchestrator")
README_MAX_LINES = 250


def relative_links(markdown: str) -> list[str]:
    """The targets of ``[text](target)`` links that point into the repository (no URL scheme,
    no bare anchor), without their ``#anchor``."""
    targets = re.findall(r"\]\(([^)\s]+)\)", markdown)
    return [t.split("#", 1)[0] for t in targets if "://" not in t and not t.startswith("#")]


def test_relative_links_are_found_without_urls_and_anchors() -> None:
    text = "[a](docs/a.md) [b](https://x.test/b.md) [c](#top) [d](../bench/README.md#tools)"
    assert relative_links(text) == ["docs/a.md", "../bench/README.md"]


def test_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md is {lines} lines; move detail into docs/"


def test_every_page_the_readme_links_exists() -> None:
    links = relative_links((ROOT / "README.md").read_text())
    missing = [t for t in links if not (ROOT / t).exists()]
    assert links and not missing, f"README links to missing pages: {missing}"


def test_one_page_per_service_and_the_readme_links_each() -> None:
    links = set(relative_links((ROOT / "README.md").read_text()))
    pages = {f"docs/{name}.md" for name in SERVICES} | {
        "docs/configuration.md",
        "docs/testing.md",
        "bench/README.md",
    }
    assert pages <= links, f"not linked from README.md: {sorted(pages - links)}"
    assert all((ROOT / page).is_file() for page in pages)
