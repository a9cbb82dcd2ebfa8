"""Contract drift: each service's OpenAPI document, generated from its FastAPI app, must equal
the snapshot committed beside it (``services/<name>/openapi.json``).

A change to a route or a wire model then shows up in review as a change to the snapshot, and
a forgotten regeneration fails the suite with the diff and the command that fixes it::

    make openapi                                  # regenerate every snapshot
    python scripts/openapi.py model verifier      # some of them
    python scripts/openapi.py --check             # what CI does: fail on drift

The sandbox keeps its hand-reviewed ``openapi.yaml`` and its own test
(``tests/sandbox/test_api_contract.py``); it is listed here so the typed-routes check covers it.

:func:`untyped_responses` finds operations whose success body is free-form (``{}`` or an
object without properties): a route other services call must answer a pydantic model.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "make openapi  (or: python scripts/openapi.py {name})"


@contextmanager
def _isolated_settings() -> Iterator[Path]:
    """Default settings on a throwaway data dir, whatever this shell's K3STACK_* say."""
    from shared.settings import get_settings

    saved = {k: v for k, v in os.environ.items() if k.startswith("K3STACK_")}
    with tempfile.TemporaryDirectory(prefix="k3openapi-") as tmp:
        for k in saved:
            del os.environ[k]
        os.environ["K3STACK_DATA_DIR"] = tmp
        os.environ["K3STACK_ENV_FILE"] = "/nonexistent/.env"
        get_settings.cache_clear()
        try:
            yield Path(tmp)
        finally:
            for k in [k for k in os.environ if k.startswith("K3STACK_")]:
                del os.environ[k]
            os.environ.update(saved)
            get_settings.cache_clear()


def _model_app(data_dir: Path) -> Any:
    from services.model.app import create_app
    from shared.settings import load_settings

    # the replay engine builds without loading weights; the routes are the same for every engine
    replay = data_dir / "none.jsonl"
    return create_app(load_settings(model={"engine": "replay", "replay_file": str(replay)}))


def _sandbox_app(data_dir: Path) -> Any:
    from services.sandbox.app import create_app
    from shared.settings import load_settings

    return create_app(load_settings(), runtimes={})


def _plain(module: str) -> Callable[[Path], Any]:
    def make(data_dir: Path) -> Any:
        import importlib

        return importlib.import_module(module).create_app()

    return make


@dataclass(frozen=True)
class Contract:
    name: str
    make_app: Callable[[Path], Any]
    snapshot: Path
    # paths other services call (prefixes); None: all of them
    called: tuple[str, ...] | None = None
    own_test: str | None = None  # a service whose snapshot another test guards

    def generate(self) -> dict[str, Any]:
        with _isolated_settings() as data_dir:
            return self.make_app(data_dir).openapi()


CONTRACTS: dict[str, Contract] = {
    c.name: c
    for c in [
        Contract("model", _model_app, REPO / "services/model/openapi.json"),
        Contract(
            "sandbox",
            _sandbox_app,
            REPO / "services/sandbox/openapi.yaml",
            own_test="tests/sandbox/test_api_contract.py",
        ),
        Contract(
            "tools",
            _plain("services.tools.app"),
            REPO / "services/tools/openapi.yaml",
            called=("/worlds", "/scenarios"),  # the mock apps follow Gmail/Slack/Notion/Calendar
            own_test="tests/tools/test_api_contract.py",
        ),
        Contract(
            "verifier", _plain("services.verifier.app"), REPO / "services/verifier/openapi.json"
        ),
        Contract(
            "orchestrator",
            _plain("services.orchestrator.app"),
            REPO / "services/orchestrator/openapi.json",
        ),
    ]
}
DRIFT_GUARDED = [n for n, c in CONTRACTS.items() if c.own_test is None]


def canonical(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_snapshot(name: str) -> Path:
    contract = CONTRACTS[name]
    if contract.own_test:
        raise ValueError(
            f"{name}'s snapshot is guarded by {contract.own_test}; regenerate it there"
        )
    contract.snapshot.write_text(canonical(contract.generate()), encoding="utf-8")
    return contract.snapshot


def drift(name: str) -> str:
    """A unified diff from the committed snapshot to the app's document ('' when equal)."""
    contract = CONTRACTS[name]
    live = canonical(contract.generate())
    committed = contract.snapshot.read_text(encoding="utf-8") if contract.snapshot.exists() else ""
    if committed == live:
        return ""
    rel = (
        contract.snapshot.relative_to(REPO)
        if contract.snapshot.is_relative_to(REPO)
        else contract.snapshot
    )
    lines = difflib.unified_diff(
        committed.splitlines(keepends=True),
        live.splitlines(keepends=True),
        fromfile=f"{rel} (committed)",
        tofile=f"{rel} (generated from the app)",
        n=2,
    )
    diff = "".join(lines)
    cut = diff.splitlines()[:150]
    more = "" if len(cut) == len(diff.splitlines()) else "\n… (diff cut at 150 lines)"
    return "\n".join(cut) + more


def assert_no_drift(name: str) -> None:
    diff = drift(name)
    assert not diff, (
        f"the {name} service's OpenAPI document drifted from its committed snapshot.\n"
        f"If the change is intended, regenerate: {REGENERATE.format(name=name)}\n\n{diff}"
    )


# --------------------------------------------------------------------------- typed routes


def _free_form(schema: dict[str, Any], components: dict[str, Any]) -> bool:
    """Whether ``schema`` says nothing about its fields (``{}``, a bare object, a dict)."""
    if "$ref" in schema:
        target = components.get(schema["$ref"].rsplit("/", 1)[-1], {})
        return _free_form(target, components) if target is not schema else False
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"]
            return any(_free_form(s, components) for s in options)
    kind = schema.get("type")
    if kind == "array":
        return _free_form(schema.get("items", {}), components)
    if kind in ("string", "integer", "number", "boolean", "null"):
        return False
    return not schema.get("properties")


def untyped_responses(name: str, doc: dict[str, Any] | None = None) -> list[str]:
    """``"METHOD path"`` of each operation other services call whose 2xx JSON body is
    free-form."""
    contract = CONTRACTS[name]
    doc = doc or contract.generate()
    components = doc.get("components", {}).get("schemas", {})
    out = []
    for path, item in doc["paths"].items():
        if contract.called is not None and not path.startswith(contract.called):
            continue
        if contract.name == "tools" and _is_app_route(path):
            continue
        for method, op in item.items():
            for status, resp in op.get("responses", {}).items():
                if not status.startswith("2"):
                    continue
                body = resp.get("content", {}).get("application/json")
                if body is not None and _free_form(body.get("schema", {}), components):
                    out.append(f"{method.upper()} {path}")
    return sorted(set(out))


def _is_app_route(path: str) -> bool:
    """An app route (Gmail, Canvas, …: they follow those APIs' shapes), named by the tools
    service's own list of app folders, so a new app needs no edit here."""
    from services.tools.openapi_contract import app_segments

    parts = path.strip("/").split("/")
    return len(parts) >= 3 and parts[0] == "worlds" and parts[2] in app_segments()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Regenerate or check services' OpenAPI snapshots.")
    parser.add_argument("services", nargs="*", help=f"default: {' '.join(DRIFT_GUARDED)}")
    parser.add_argument("--check", action="store_true", help="fail on drift, write nothing")
    args = parser.parse_args(argv)
    names = args.services or DRIFT_GUARDED
    unknown = [n for n in names if n not in DRIFT_GUARDED]
    if unknown:
        parser.error(f"no JSON snapshot for {unknown}; choose from {DRIFT_GUARDED}")
    failed = False
    for name in names:
        if args.check:
            diff = drift(name)
            print(f"{name}: {'drifted' if diff else 'ok'}")
            if diff:
                print(diff)
                failed = True
        else:
            print(f"wrote {write_snapshot(name).relative_to(REPO)}")
    return 1 if failed else 0
