"""services/*/Dockerfile and .dockerignore, checked without a Docker engine.

The Dockerfiles are parsed into instructions; the .dockerignore rules are applied the way the
Docker builder applies them (last matching rule wins, `!` re-includes); and the HEALTHCHECK
command baked into the images is run against a live service.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from shared.settings import SERVICE_NAMES, Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORTS = {name: Settings.model_fields[name].default_factory().port for name in SERVICE_NAMES}
BASE_IMAGE = "python:3.11-slim-bookworm"


def instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines: list[tuple[str, str]] = []
    pending = ""
    for raw in (REPO_ROOT / "services" / name / "Dockerfile").read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, args = full.partition(" ")
        lines.append((keyword.upper(), args.strip()))
    assert not pending, "dangling line continuation"
    return lines


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def stages(name: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions(name):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, args))
    return result


@pytest.fixture(params=SERVICE_NAMES)
def service(request: pytest.FixtureRequest) -> str:
    return request.param


def test_extras_used_by_dockerfiles_exist_in_pyproject(service: str) -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert service in pyproject["project"]["optional-dependencies"]
    runs = [a for k, a in instructions(service) if k == "RUN"]
    assert any("pip wheel --wheel-dir /wheels" in r and f'".[{service}]"' in r for r in runs)
    assert any(
        f'pip install --no-index --find-links /wheels "k3stack[{service}]"' in r for r in runs
    )


def test_multi_stage_on_the_slim_python_image(service: str) -> None:
    args = dict(a.split("=", 1) for k, a in instructions(service) if k == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"] == BASE_IMAGE
    froms = [a for k, a in instructions(service) if k == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE} AS runtime"]
    runtime = stages(service)[-1]
    # The runtime stage takes the builder's wheels through a bind mount, never its sources.
    assert not any(k == "COPY" for k, _ in runtime)
    assert any("--mount=type=bind,from=builder" in a for k, a in runtime if k == "RUN")


def test_port_command_and_healthcheck(service: str) -> None:
    ins = instructions(service)
    port = DEFAULT_PORTS[service]
    assert ("EXPOSE", str(port)) in ins
    cmd = [exec_form(a) for k, a in ins if k == "CMD"]
    assert cmd == [["python", "-m", f"services.{service}"]]
    health = [a for k, a in ins if k == "HEALTHCHECK"]
    assert len(health) == 1
    check = exec_form(health[0].split(" CMD ", 1)[1])
    assert check[:2] == ["python", "-c"] and "/health" in check[2]
    assert f"K3STACK_{service.upper()}__PORT" in check[2] and f"'{port}'" in check[2]
    env = " ".join(a for k, a in ins if k == "ENV")
    assert f"K3STACK_{service.upper()}__HOST=0.0.0.0" in env
    assert f"K3STACK_{service.upper()}__PORT={port}" in env
    assert "K3STACK_DATA_DIR=/var/lib/k3stack" in env


def test_user_is_unprivileged_except_the_sandbox(service: str) -> None:
    runtime = stages(service)[-1]
    users = [a for k, a in runtime if k == "USER"]
    if service == "sandbox":
        assert users == []  # root: QEMU opens /dev/kvm
        # The host packages and the guest kernel come from the same setup script a developer
        # machine runs, bound into the build (no COPY layer).
        runs = " ".join(a for k, a in runtime if k == "RUN")
        assert "source=scripts/setup_sandbox.sh" in runs and "bash /tmp/setup_sandbox.sh" in runs
        script = (REPO_ROOT / "scripts/setup_sandbox.sh").read_text()
        packages = script.split("PKGS=(", 1)[1].split(")", 1)[0].split()
        for package in ("qemu-system-x86", "busybox-static", "cpio", "gcc"):
            assert package in packages
    else:
        assert users == ["10001:10001"]
        runs = " ".join(a for k, a in runtime if k == "RUN")
        assert "useradd --system --uid 10001" in runs
    if service == "verifier":
        args = " ".join(a for k, a in runtime if k == "ARG")
        assert "chromium" in args


def test_copied_sources_exist(service: str) -> None:
    for keyword, args in instructions(service):
        if keyword != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = shlex.split(args)
        for source in sources:
            matches = list(REPO_ROOT.glob(source))
            if "[" not in source:  # a bracket glob may match nothing (optional README.md)
                assert matches, f"COPY source {source} missing"
            for match in matches:
                rel = match.relative_to(REPO_ROOT).as_posix()
                assert included_in_context(rel), f"{rel} is copied but .dockerignore'd"


# ---- .dockerignore -------------------------------------------------------------------------------


def _rules() -> list[tuple[bool, str]]:
    rules = []
    for line in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        rules.append((negate, line.lstrip("!").strip("/")))
    return rules


def _matches(path: str, pattern: str) -> bool:
    """A pattern matches a path or any folder above it (excluding a folder excludes its files)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    pattern_variants = {pattern, pattern.removeprefix("**/")}
    for prefix in prefixes:
        for pat in pattern_variants:
            if fnmatch.fnmatchcase(prefix, pat):
                return True
    return False


def included_in_context(path: str) -> bool:
    included = True
    for negate, pattern in _rules():
        if _matches(path, pattern):
            included = negate
    return included


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "README.md",
        "shared/settings.py",
        "services/model/app.py",
        "services/tools/migrations/script.py.mako",
        "services/tools/migrations/versions/0001_worlds.py",
    ],
)
def test_dockerignore_keeps_the_sources(path: str) -> None:
    assert included_in_context(path)


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD",
        ".venv/bin/python",
        ".env",
        "tests/deploy/test_helm.py",
        "helm/k3stack/values.yaml",
        "k3stack.egg-info/PKG-INFO",
        "shared/__pycache__/settings.cpython-311.pyc",
        "services/tools/__pycache__/app.cpython-311.pyc",
        "services/model/.env",
    ],
)
def test_dockerignore_keeps_local_state_out(path: str) -> None:
    assert not included_in_context(path)


# ---- the baked-in HEALTHCHECK, run for real ------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthcheck_command(service: str) -> list[str]:
    health = next(a for k, a in instructions(service) if k == "HEALTHCHECK")
    return exec_form(health.split(" CMD ", 1)[1])


def test_image_healthcheck_command_against_a_live_service(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env |= {
        "K3STACK_DATA_DIR": str(tmp_path),
        "K3STACK_MODE": "deployed",
        "K3STACK_TOOLS__PORT": str(port),
        "K3STACK_DATABASE_URL": f"sqlite:///{tmp_path / 'k3stack.db'}",
    }
    check = [sys.executable if c == "python" else c for c in _healthcheck_command("tools")]
    # Nothing listens yet: the check must fail.
    assert subprocess.run(check, env=env, capture_output=True, timeout=20).returncode != 0
    server = subprocess.Popen(
        [sys.executable, "-m", "services.tools", "--host", "127.0.0.1"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            result = subprocess.run(check, env=env, capture_output=True, timeout=20)
            if result.returncode == 0:
                break
            if server.poll() is not None or time.monotonic() > deadline:
                out = server.stdout.read().decode() if server.stdout else ""
                pytest.fail(f"service never became healthy:\n{out}\n{result.stderr.decode()}")
            time.sleep(0.3)
    finally:
        server.terminate()
        server.wait(timeout=10)
