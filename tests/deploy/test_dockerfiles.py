"""The root Dockerfile (one target per service) and .dockerignore, checked without a Docker engine.

The Dockerfile is parsed into stages of instructions; its requirement-file step is run for real
with /bin/sh; the .dockerignore rules are applied the way the Docker builder applies them (last
matching rule wins, `!` re-includes); and the HEALTHCHECK command baked into the images is run
against a live service.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
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
DOCKERFILE = REPO_ROOT / "Dockerfile"
DEFAULT_PORTS = {name: Settings.model_fields[name].default_factory().port for name in SERVICE_NAMES}
BASE_IMAGE = "python:3.11-slim-bookworm"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    lines: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            continue
        if not pending and not stripped:
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


def stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions of each named stage (``FROM x AS name``), in order."""
    result: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for keyword, args in instructions():
        if keyword == "FROM":
            source, _, name = args.partition(" AS ")
            assert name, f"unnamed stage FROM {args}"
            current = result.setdefault(name.strip(), [])
            current.append((keyword, source.strip()))
            continue
        if current is not None:
            current.append((keyword, args))
    return result


def stage_args(stage: list[tuple[str, str]]) -> dict[str, str]:
    return dict(a.split("=", 1) for k, a in stage if k == "ARG" and "=" in a)


@pytest.fixture(params=SERVICE_NAMES)
def service(request: pytest.FixtureRequest) -> str:
    return request.param


def test_one_dockerfile_with_a_target_per_service() -> None:
    assert [p.relative_to(REPO_ROOT) for p in REPO_ROOT.glob("services/*/Dockerfile")] == []
    st = stages()
    for svc in SERVICE_NAMES:
        assert st[svc][0] == ("FROM", "base"), svc
        assert st[f"deps-{svc}"][0] == ("FROM", "deps"), svc
    args = dict(a.split("=", 1) for k, a in instructions() if k == "ARG" and "=" in a)
    assert args["BASE_IMAGE"] == BASE_IMAGE
    for name in ("deps", "code", "base"):
        assert st[name][0] == ("FROM", "${BASE_IMAGE}")
    # The builder's own frontend: a `# syntax=` image would need a registry.
    assert not DOCKERFILE.read_text().startswith("# syntax=")


def test_dependency_layers_come_before_code_layers(service: str) -> None:
    st = stages()
    # The dependency stages see pyproject.toml only: a code change leaves them cached.
    deps_copies = [a for k, a in st["deps"] if k == "COPY"]
    assert deps_copies == ["pyproject.toml ./"]
    assert not any(k == "COPY" for k, _ in st[f"deps-{service}"])
    runs = [a for k, a in st[service] if k == "RUN"]
    deps_run = next(i for i, r in enumerate(runs) if f"from=deps-{service}," in r)
    code_run = next(i for i, r in enumerate(runs) if "from=code," in r)
    assert deps_run < code_run
    assert "pip install --no-index --find-links /wheels" in runs[deps_run]
    assert "pip install --no-index --no-deps /code/*.whl" in runs[code_run]
    # Wheels arrive through bind mounts, never a COPY layer.
    assert not any(k == "COPY" for k, _ in st[service])
    assert any(
        f"-r requirements-{service}.txt" in a for k, a in st[f"deps-{service}"] if k == "RUN"
    )
    code_runs = " ".join(a for k, a in st["code"] if k == "RUN")
    assert "pip wheel --no-deps --find-links /wheelhouse --wheel-dir /code ." in code_runs
    # Every dependency build prefers the context's wheelhouse/ (offline builds, a local torch).
    for stage in (f"deps-{service}", "code"):
        run = " ".join(a for k, a in st[stage] if k == "RUN")
        assert "--mount=type=bind,source=wheelhouse,target=/wheelhouse" in run, stage
        assert "--find-links /wheelhouse" in run, stage


def test_requirement_files_are_the_extras_of_pyproject(tmp_path: Path) -> None:
    """The deps stage's RUN, run with /bin/sh as the builder would, writes what pyproject says."""
    (tmp_path / "pyproject.toml").write_bytes((REPO_ROOT / "pyproject.toml").read_bytes())
    run = next(a for k, a in stages()["deps"] if k == "RUN")
    subprocess.run(
        ["/bin/sh", "-c", run.replace("python ", f"{sys.executable} ", 1)],
        cwd=tmp_path,
        check=True,
        timeout=60,
    )
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    for svc in SERVICE_NAMES:
        lines = (tmp_path / f"requirements-{svc}.txt").read_text().splitlines()
        assert lines == project["dependencies"] + project["optional-dependencies"][svc]
    assert "torch==2.13.0" in (tmp_path / "requirements-model.txt").read_text().splitlines()


def test_torch_is_the_cpu_build_unless_asked_for_cuda() -> None:
    torch_images = ("model", "verifier")  # the verifier's kernel tasks run torch
    for name in torch_images:
        deps = stages()[f"deps-{name}"]
        assert stage_args(deps)["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
        run = " ".join(a for k, a in deps if k == "RUN")
        assert '${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}' in run
    others = " ".join(
        a for s in SERVICE_NAMES if s not in torch_images for _, a in stages()[f"deps-{s}"]
    )
    assert "TORCH" not in others


def test_port_command_and_healthcheck(service: str) -> None:
    ins = stages()[service]
    port = DEFAULT_PORTS[service]
    assert ("EXPOSE", str(port)) in ins
    cmd = [exec_form(a) for k, a in ins if k == "CMD"]
    assert cmd == [["python", "-m", f"services.{service}"]]
    # One HEALTHCHECK, in base, inherited by every target; it probes the port named by the
    # target's own K3STACK_<SERVICE>__PORT, found through K3STACK_IMAGE_SERVICE.
    assert not any(k == "HEALTHCHECK" for k, _ in ins)
    check = _healthcheck_command(service)
    # bash's /dev/tcp under a KILL timeout (no interpreter per probe; none outlives its timeout)
    assert check[:6] == ["timeout", "-s", "KILL", "10", "bash", "-c"] and "/health/live" in check[6]
    assert "K3STACK_IMAGE_SERVICE" in check[6] and "__PORT" in check[6]
    env = " ".join(a for k, a in ins if k == "ENV")
    assert f"K3STACK_IMAGE_SERVICE={service}" in env
    assert f"K3STACK_{service.upper()}__HOST=0.0.0.0" in env
    assert f"K3STACK_{service.upper()}__PORT={port}" in env
    base_env = " ".join(a for k, a in stages()["base"] if k == "ENV")
    assert "K3STACK_DATA_DIR=/var/lib/k3stack" in base_env
    assert "K3STACK_MODE=deployed" in base_env


def test_user_is_unprivileged_except_the_sandbox(service: str) -> None:
    runtime = stages()[service]
    users = [a for k, a in runtime if k == "USER"]
    base_runs = " ".join(a for k, a in stages()["base"] if k == "RUN")
    assert "useradd --system --uid 10001" in base_runs
    if service == "sandbox":
        assert users == []  # root: QEMU opens /dev/kvm
        # The host packages and the guest kernel come from the same setup script a developer
        # machine runs, bound into the build (no COPY layer).
        runs = " ".join(a for k, a in runtime if k == "RUN")
        assert "source=scripts/setup_sandbox.sh" in runs and "bash /tmp/setup_sandbox.sh" in runs
        env = " ".join(a for k, a in runtime if k == "ENV")
        assert "K3STACK_SANDBOX__CACHE_DIR=/var/cache/k3stack" in env
        # Root without capabilities (cap_drop ALL) writes only what root owns.
        assert "chown root:root /var/lib/k3stack" in runs
        script = (REPO_ROOT / "scripts/setup_sandbox.sh").read_text()
        packages = script.split("PKGS=(", 1)[1].split(")", 1)[0].split()
        for package in ("qemu-system-x86", "busybox-static", "cpio", "gcc"):
            assert package in packages
    else:
        assert users == ["10001:10001"]
    if service == "verifier":
        args = " ".join(a for k, a in runtime if k == "ARG")
        assert "chromium" in args


def test_copied_sources_exist() -> None:
    copies = [a for k, a in instructions() if k == "COPY" and not a.startswith("--from")]
    assert copies
    for args in copies:
        *sources, _dest = shlex.split(args)
        for source in sources:
            matches = list(REPO_ROOT.glob(source))
            if "[" not in source:  # a bracket glob may match nothing (optional README.md)
                assert matches, f"COPY source {source} missing"
            for match in matches:
                rel = match.relative_to(REPO_ROOT).as_posix()
                assert included_in_context(rel), f"{rel} is copied but .dockerignore'd"
    binds = re.findall(r"--mount=type=bind,source=([^,\s]+)", DOCKERFILE.read_text())
    for source in binds:
        if source == "wheelhouse":  # a tracked folder (its README.md), filled by make e2e
            assert (REPO_ROOT / source / "README.md").is_file()
            assert included_in_context("wheelhouse/torch-2.13.0-cp311-none-any.whl")
            continue
        assert (REPO_ROOT / source).is_file() and included_in_context(source), source


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
    """The HEALTHCHECK a target's image carries: its own, else the one its FROM stage has."""
    st = stages()
    stage = service
    while True:
        health = [a for k, a in st[stage] if k == "HEALTHCHECK"]
        if health:
            assert len(health) == 1, stage
            return exec_form(health[0].split(" CMD ", 1)[1])
        stage = st[stage][0][1]
        assert stage in st, f"{service} carries no HEALTHCHECK"


def test_image_healthcheck_command_against_a_live_service(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env |= {
        "K3STACK_DATA_DIR": str(tmp_path),
        "K3STACK_MODE": "local",  # deployed-mode start-up refusals: tests/deploy/test_refusals.py
        "K3STACK_TOOLS__PORT": str(port),
        "K3STACK_IMAGE_SERVICE": "tools",  # the tools target's ENV
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
        deadline = time.monotonic() + 120
        while True:
            result = subprocess.run(check, env=env, capture_output=True, timeout=20)
            if result.returncode == 0:
                break
            if server.poll() is not None or time.monotonic() > deadline:
                server.terminate()
                out = server.communicate(timeout=10)[0].decode()
                pytest.fail(f"service never became healthy:\n{out}\n{result.stderr.decode()}")
            time.sleep(0.3)
    finally:
        server.terminate()
        server.wait(timeout=10)
