"""The k3stack wheel is what the images install, so it must carry every file a service reads at
run time: the wheel is built from a copy of the tracked sources, compared with them, installed
into a fresh virtualenv outside the checkout, and a busybox microVM is booted from that install
(guest agent and page hasher compiled from the installed sources into an empty cache).

The fresh virtualenv has no pip and no copies of the dependencies: a ``.pth`` file points it at
the test interpreter's site-packages (torch and all), without that environment's editable
k3stack, so every ``shared``/``services`` module comes from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "services")


def tracked_files() -> list[str]:
    """Files under shared/ and services/ that the repository holds (git's view, else the tree)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--", *PACKAGES],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = [
            p.relative_to(REPO_ROOT).as_posix()
            for pkg in PACKAGES
            for p in (REPO_ROOT / pkg).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    return sorted(f for f in out if (REPO_ROOT / f).is_file())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built offline from a copy of the sources (the checkout gets no build/)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", *tracked_files()):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", "--wheel-dir", str(dist), str(src)],
        check=True, timeout=300,
    )  # fmt: skip
    (built,) = dist.glob("k3stack-*.whl")
    return built


def test_every_tracked_package_file_is_in_the_wheel(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in tracked_files() if f not in names]
    assert missing == []
    for runtime_file in (
        "services/sandbox/guest/agent.c",
        "services/sandbox/guest/init.sh",
        "services/sandbox/pagestore/pagehash.c",
        "services/sandbox/openapi.yaml",
        "services/model/tokenizer/data/tokenizer.json",
    ):
        assert runtime_file in names


@pytest.mark.vm
def test_the_probe_refuses_an_install_without_the_guest_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import services.sandbox.images.builder as builder
    from services.sandbox.runtime.microvm import MicroVMRuntime

    assert MicroVMRuntime(root=tmp_path / "vms").available()[0], "needs scripts/setup_sandbox.sh"
    monkeypatch.setattr(builder, "GUEST_DIR", tmp_path / "no-guest")
    ok, why = MicroVMRuntime(root=tmp_path / "vms").available()
    assert not ok
    assert "files missing from this installation" in why and "agent.c" in why


BOOT_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import services, shared
    from services.sandbox.pagestore.hashing import native_lib
    from services.sandbox.runtime.base import ExecRequest, SandboxSpec
    from services.sandbox.runtime.microvm import MicroVMRuntime

    work = Path(sys.argv[1])
    rt = MicroVMRuntime(root=work / "vms")
    ok, why = rt.available()
    if not ok:
        raise SystemExit(f"microvm unavailable from the wheel: {why}")
    h = rt.create("wheel-vm", SandboxSpec(), work / "sbx")
    try:
        r = rt.exec(h, ExecRequest(cmd="echo booted-from-wheel; uname -s"))
    finally:
        rt.destroy(h)
        rt.close()
    print(json.dumps({
        "stdout": r.stdout, "exit_code": r.exit_code,
        "services": services.__path__[0], "shared": shared.__path__[0],
        "pagehash_native": native_lib() is not None,
    }))
    """
)


@pytest.mark.vm
@pytest.mark.slow
def test_installed_wheel_boots_a_busybox_microvm(wheel: Path, tmp_path: Path) -> None:
    from services.sandbox.images.builder import sandbox_cache_dir

    real_cache = sandbox_cache_dir()
    if not (real_cache / "kernel" / "vmlinuz").is_file():
        pytest.fail(f"no guest kernel in {real_cache}: run scripts/setup_sandbox.sh")
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()
    )  # fmt: skip
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--ignore-installed", "--quiet", str(wheel)],
        check=True, timeout=300, env=clean_env,
    )  # fmt: skip
    # Then the dependencies of the test environment (torch 2.13.0 CPU included), reused, not
    # copied (after the install, or pip would take the editable k3stack there as installed).
    (site / "k3stack-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # An empty cache but for the kernel: the image (agent.c, init.sh) and the page hasher
    # (pagehash.c) are built from the installed files.
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "kernel").symlink_to(real_cache / "kernel")
    if (real_cache / "accel.json").is_file():  # skip a second accelerator boot probe
        shutil.copy2(real_cache / "accel.json", cache / "accel.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env.pop("PYTHONPATH", None)
    env |= {
        "K3STACK_SANDBOX__CACHE_DIR": str(cache),
        "K3STACK_DATA_DIR": str(tmp_path / "data"),
        "K3STACK_ENV_FILE": "/dev/null",
    }
    outside = tmp_path / "run"
    outside.mkdir()
    result = subprocess.run(
        [python, "-c", BOOT_SCRIPT, str(tmp_path)],
        cwd=outside, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["exit_code"] == 0
    assert report["stdout"] == "booted-from-wheel\nLinux\n"
    for pkg in ("services", "shared"):
        assert Path(report[pkg]).is_relative_to(venv), report[pkg]
        assert not Path(report[pkg]).is_relative_to(REPO_ROOT)
    assert report["pagehash_native"]
    assert any(cache.glob("native/libk3pagehash-*.so"))
    assert any((cache / "images").iterdir())
