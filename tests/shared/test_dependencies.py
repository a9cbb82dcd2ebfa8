"""Every pinned dependency is installed at its pinned version and imports.

A broken install (a missing wheel, a compiled extension that does not load, the wrong version)
fails here, by name, instead of turning the tests that need it into silent skips. Covers the
core dependencies and the ``all`` and ``test`` extras of pyproject.toml, as ``make setup``
installs them; requirements whose environment marker does not hold on this machine (triton
off Linux x86-64) are not installed there, so they are not checked there.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]

# Distributions whose import name is neither their own name nor their only top-level module.
IMPORT_NAMES = {"google-api-python-client": "googleapiclient"}


def pinned_requirements() -> list[Requirement]:
    """Core dependencies plus the ``all`` and ``test`` extras, self-references expanded."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    todo = [*project["dependencies"], *extras["all"], *extras["test"]]
    seen: dict[str, Requirement] = {}
    while todo:
        req = Requirement(todo.pop(0))
        if canonicalize_name(req.name) == "k3stack":
            todo += [spec for extra in sorted(req.extras) for spec in extras[extra]]
            continue
        if req.marker is None or req.marker.evaluate():
            seen.setdefault(canonicalize_name(req.name), req)
    return list(seen.values())


def import_name(dist: str) -> str | None:
    """The module a distribution is imported by, from what it installed."""
    if dist in IMPORT_NAMES:
        return IMPORT_NAMES[dist]
    tops = {
        module
        for module, dists in metadata.packages_distributions().items()
        if dist in {canonicalize_name(d) for d in dists}
        and not module.startswith("_")
        and "/" not in module
    }
    own = dist.replace("-", "_")
    if own in tops:
        return own
    return tops.pop() if len(tops) == 1 else None


def test_every_requirement_is_pinned_exactly():
    for req in pinned_requirements():
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{req} is not pinned with =="


def install_problems(requirements: list[Requirement]) -> tuple[list[str], dict[str, str]]:
    """What is wrong with the installed ``requirements`` (empty when nothing), and the module
    each was imported by."""
    problems: list[str] = []
    modules: dict[str, str] = {}
    for req in requirements:
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{req}: not installed")
            continue
        if not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req}: installed {version}")
        module = import_name(canonicalize_name(req.name))
        if module is None:
            problems.append(f"{req}: no import name known (add it to IMPORT_NAMES)")
        else:
            modules[str(req)] = module
    # Import in a fresh interpreter: nothing this test process already loaded can hide a
    # failure, and whatever the imports do to the process stays out of the test session.
    script = (
        "import importlib, json, sys\n"
        "failed = {}\n"
        "for req, module in json.loads(sys.argv[1]).items():\n"
        "    try:\n"
        "        importlib.import_module(module)\n"
        "    except BaseException as exc:\n"
        "        failed[req] = f'import {module}: {type(exc).__name__}: {exc}'\n"
        "print(json.dumps(failed))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(modules)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    problems += [f"{req}: {why}" for req, why in failed.items()]
    return problems, modules


@pytest.mark.slow  # imports torch, triton, fla, schemathesis… in a fresh interpreter
def test_every_pinned_dependency_is_installed_and_imports():
    problems, modules = install_problems(pinned_requirements())
    assert problems == [], "broken install:\n  " + "\n  ".join(problems)
    # The ones whose tests used to skip when they were missing are among them.
    assert {"torch", "fla", "triton", "schemathesis", "googleapiclient"} <= set(modules.values())


def test_the_check_names_what_is_broken(monkeypatch):
    monkeypatch.setitem(IMPORT_NAMES, "pyyaml", "yaml_that_is_not_there")
    problems, _ = install_problems(
        [
            Requirement("k3stack-no-such-dist==1.0"),
            Requirement("pydantic==0.0.1"),
            Requirement("pyyaml==6.0.4"),
        ]
    )
    assert problems[0] == "k3stack-no-such-dist==1.0: not installed"
    assert problems[1].startswith("pydantic==0.0.1: installed 2.")
    assert problems[2].startswith("pyyaml==6.0.4: import yaml_that_is_not_there: ModuleNotFound")
    assert len(problems) == 3
