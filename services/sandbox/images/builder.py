"""Image builder of the microvm runtime: guest kernel lookup, busybox and Debian images.

An *image* is what a microVM boots: the Debian cloud kernel fetched by
``scripts/setup_sandbox.sh``, an initramfs, and optionally a read-only base disk.

* ``busybox`` (tests, benchmarks): one uncompressed initramfs holding static busybox, the
  virtio modules, ``/init`` (``guest/init.sh``) and the guest agent (``guest/agent.c``, built
  here with ``gcc -static``). The root filesystem is the kernel's initramfs tmpfs, i.e. guest
  RAM: every file a sandbox writes lives in memory, so memory checkpoints capture files and
  processes together and no disk layer is needed.
* ``debian`` (real tasks): a debootstrapped Debian 12 root with python3, bash, coreutils, git,
  curl, and Debian's nodejs + npm (web-app candidates build and serve in it), as an ext4 base disk (qcow2, shared read-only by every sandbox; each sandbox writes to
  its own qcow2 overlay) plus the busybox initramfs, whose ``/init`` mounts it when present.
  Built on demand (minutes, needs ``debootstrap`` and the Debian mirror), never in tests.

Build outputs go to a cache directory (never into the repository):
``$K3STACK_SANDBOX__CACHE_DIR``, else ``/var/cache/k3stack`` as root, else ``~/.cache/k3stack``.
Each image lives in a folder named after a hash of its inputs, so a changed agent or init
script gives a new image and old sandboxes keep theirs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from services.sandbox.runtime.base import RuntimeUnavailable
from shared.settings import get_settings

log = logging.getLogger(__name__)

GUEST_DIR = Path(__file__).resolve().parent.parent / "guest"
SETUP_HINT = "run scripts/setup_sandbox.sh (installs QEMU, busybox-static, fetches the kernel)"
MODULE_ORDER = (
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "virtio_console",
    "virtio_blk",
    "virtio_balloon",
    "failover",
    "net_failover",
    "virtio_net",
)
"""Guest modules in load order (each depends only on earlier ones)."""


def sandbox_cache_dir() -> Path:
    """Where kernels and images are cached (see module docstring)."""
    configured = get_settings().sandbox.cache_dir
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return Path("/var/cache/k3stack")
    return Path.home() / ".cache" / "k3stack"


@dataclass(frozen=True)
class Kernel:
    vmlinuz: Path
    modules: Path
    version: str


@dataclass(frozen=True)
class Image:
    """A bootable image. ``disk`` (qcow2, read-only base) is None for initramfs-only images."""

    name: str
    kernel: Kernel
    initrd: Path
    disk: Path | None = None
    cmdline: str = ""


def find_kernel() -> Kernel:
    """The guest kernel unpacked by the setup script.

    Raises:
        RuntimeUnavailable: not there yet (the message says to run the setup script).
    """
    kdir = sandbox_cache_dir() / "kernel"
    vmlinuz, modules = kdir / "vmlinuz", kdir / "modules"
    if not vmlinuz.is_file() or not modules.is_dir():
        raise RuntimeUnavailable(f"guest kernel not found in {kdir}: {SETUP_HINT}")
    version = (kdir / "version").read_text().strip() if (kdir / "version").exists() else "?"
    return Kernel(vmlinuz=vmlinuz, modules=modules, version=version)


# --------------------------------------------------------------------------- cpio (newc)


class CpioWriter:
    """Minimal SVR4 ``newc`` archive writer (what the kernel unpacks as initramfs)."""

    def __init__(self, fh) -> None:
        self._fh = fh
        self._ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)):
        nameb = name.encode() + b"\0"
        fields = [
            self._ino,
            mode,
            0,
            0,
            1,
            0,
            len(data),
            0,
            0,
            rdev[0],
            rdev[1],
            len(nameb),
            0,
        ]
        self._ino += 1
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        self._fh.write(hdr + nameb)
        self._fh.write(b"\0" * ((4 - (len(hdr) + len(nameb)) % 4) % 4))
        self._fh.write(data)
        self._fh.write(b"\0" * ((4 - len(data) % 4) % 4))

    def dir(self, name: str, perm: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | perm)

    def file(self, name: str, data: bytes, perm: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | perm, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name: str, major: int, minor: int, perm: int = 0o600) -> None:
        self._entry(name, stat.S_IFCHR | perm, rdev=(major, minor))

    def close(self) -> None:
        self._entry("TRAILER!!!", 0)


# --------------------------------------------------------------------------- builders


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


def _static_busybox() -> Path:
    for cand in ("/bin/busybox", "/usr/bin/busybox"):
        p = Path(cand)
        if p.is_file():
            if shutil.which("file") is None:  # slim images (the sandbox's) have no `file`
                return p
            out = subprocess.run(["file", "-b", str(p)], capture_output=True, text=True)
            if out.returncode != 0 or "static" in out.stdout or "dynamic" not in out.stdout:
                return p
    raise RuntimeUnavailable(f"static busybox not found (package busybox-static): {SETUP_HINT}")


def build_agent(out: Path) -> Path:
    """Compile the guest agent statically (gcc -static -O2) to ``out``."""
    gcc = shutil.which("gcc")
    if not gcc:
        raise RuntimeUnavailable(f"gcc not found (needed to build the guest agent): {SETUP_HINT}")
    src = GUEST_DIR / "agent.c"
    res = subprocess.run(
        [gcc, "-static", "-O2", "-Wall", "-o", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise RuntimeUnavailable(f"building the guest agent failed: {res.stderr.strip()[-2000:]}")
    return out


def build_busybox_image(force: bool = False) -> Image:
    """Build (or reuse) the busybox initramfs image. ~1 s; cached by input hash."""
    kernel = find_kernel()
    busybox = _static_busybox()
    init = (GUEST_DIR / "init.sh").read_bytes()
    agent_src = (GUEST_DIR / "agent.c").read_bytes()
    modules = {m: kernel.modules / f"{m}.ko" for m in MODULE_ORDER}
    key = _digest(
        init,
        agent_src,
        busybox.read_bytes(),
        kernel.version.encode(),
        *(p.read_bytes() for p in modules.values() if p.exists()),
    )
    folder = sandbox_cache_dir() / "images" / f"busybox-{key}"
    initrd = folder / "initramfs.cpio"
    if initrd.exists() and not force:
        return Image(name="busybox", kernel=kernel, initrd=initrd)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".busybox-", dir=folder.parent))
    try:
        agent = build_agent(tmp / "k3s-agent")
        with open(tmp / "initramfs.cpio", "wb") as fh:
            w = CpioWriter(fh)
            for d in ("bin", "sbin", "dev", "proc", "sys", "tmp", "etc", "lib", "lib/modules"):
                w.dir(d)
            w.dir("home")
            w.dir("home/user")
            w.chardev("dev/console", 5, 1)
            w.chardev("dev/null", 1, 3, 0o666)
            w.file("bin/busybox", busybox.read_bytes(), 0o755)
            w.symlink("bin/sh", "busybox")
            w.file("sbin/k3s-agent", agent.read_bytes(), 0o755)
            w.file("init", init, 0o755)
            w.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
            w.file("etc/group", b"root:x:0:\n")
            w.file("etc/hosts", b"127.0.0.1 localhost sandbox\n")
            for name, path in modules.items():
                if path.exists():
                    w.file(f"lib/modules/{name}.ko", path.read_bytes())
            w.close()
        (tmp / "k3s-agent").unlink()
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("built busybox image %s", folder)
    return Image(name="busybox", kernel=kernel, initrd=initrd)


DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_PACKAGES = ("python3", "bash", "coreutils", "git", "curl", "ca-certificates", "procps")
DEBIAN_APT_PACKAGES = ("nodejs", "npm")
"""Installed by apt inside the debootstrapped root: debootstrap's own resolver cannot order
npm's ~360 node-* dependencies (it ignores Provides and leaves them unconfigured). In the one
Debian image rather than a second ``debian-node`` one: the base disk is shared read-only by
every sandbox (each writes to its own overlay), so its size costs disk once, not per sandbox,
while a second image would cost a second debootstrap in ``make setup``. Both lists are part
of the cache key: changing them rebuilds the image."""
DEBIAN_DISK_MB = 2048
DEBIAN_ROOT_CMDLINE = "k3s.root=/dev/vda"
"""Kernel argument that makes the initramfs ``/init`` mount the disk and switch_root into it."""
_DEBIAN_LAYOUT = b"debian-image-v1"
"""Bump when the on-disk layout made below changes (gives a new cache folder)."""


def debian_image_dir() -> Path:
    """The cache folder of the Debian base disk (named after a hash of its inputs).

    The base disk holds no agent or init: those come from the busybox initramfs at boot (the
    agent is copied into a tmpfs before switch_root), so a changed agent never rebuilds it."""
    key = _digest(
        _DEBIAN_LAYOUT,
        DEBIAN_SUITE.encode(),
        DEBIAN_MIRROR.encode(),
        ",".join(DEBIAN_PACKAGES).encode(),
        ",".join(DEBIAN_APT_PACKAGES).encode(),
        str(DEBIAN_DISK_MB).encode(),
    )
    return sandbox_cache_dir() / "images" / f"debian-{DEBIAN_SUITE}-{key}"


def find_debian_image() -> Image | None:
    """The Debian image if its base disk is already built (never builds)."""
    disk = debian_image_dir() / "base.qcow2"
    if not disk.is_file():
        return None
    base = build_busybox_image()
    return Image(
        name="debian",
        kernel=base.kernel,
        initrd=base.initrd,
        disk=disk,
        cmdline=DEBIAN_ROOT_CMDLINE,
    )


def build_debian_image(force: bool = False, progress=None) -> Image:
    """Build (or reuse) the Debian image: debootstrap + packages -> ext4 -> read-only qcow2 base.

    Each sandbox boots the shared base through its own qcow2 overlay (the runtime creates it),
    with the busybox initramfs as first stage: ``/init`` sees ``k3s.root=/dev/vda``, mounts the
    disk, copies busybox and the agent into a tmpfs at ``/run/k3s`` and switch_roots into
    Debian. A few minutes on first use (debootstrap, then apt installs nodejs and npm; needs root,
    ``debootstrap``, ``mkfs.ext4`` and ``qemu-img``); cached afterwards (``scripts/setup_sandbox.sh``
    builds it once per machine). A debootstrapped root left by an interrupted build is reused.
    """
    say = progress or (lambda msg: log.info("debian image: %s", msg))
    if not force and (img := find_debian_image()) is not None:
        return img
    build_busybox_image()
    for tool in ("debootstrap", "mkfs.ext4", "qemu-img"):
        if not shutil.which(tool):
            raise RuntimeUnavailable(
                f"{tool} not found (apt-get install debootstrap e2fsprogs qemu-utils): {SETUP_HINT}"
            )
    if os.geteuid() != 0:
        raise RuntimeUnavailable(
            f"building the Debian image needs root (debootstrap): {SETUP_HINT}"
        )
    folder = debian_image_dir()
    folder.mkdir(parents=True, exist_ok=True)
    root, done = folder / "rootfs", folder / "rootfs.done"
    t0 = time.monotonic()
    if force or not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        done.unlink(missing_ok=True)
        say(f"debootstrap {DEBIAN_SUITE} with {', '.join(DEBIAN_PACKAGES)} (minutes)")
        res = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(DEBIAN_PACKAGES)}",
                DEBIAN_SUITE,
                str(root),
                DEBIAN_MIRROR,
            ],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise RuntimeUnavailable(f"debootstrap failed: {(res.stdout + res.stderr)[-2000:]}")
        say(f"apt-get install {', '.join(DEBIAN_APT_PACKAGES)} in the root (a minute or two)")
        _apt_install(root, DEBIAN_APT_PACKAGES)
        done.write_text(f"{time.monotonic() - t0:.1f}\n")
    _prepare_debian_root(root)
    say("making the ext4 base disk")
    raw = folder / "base.ext4.tmp"
    tmp_disk = folder / "base.qcow2.tmp"
    try:
        subprocess.run(["truncate", "-s", f"{DEBIAN_DISK_MB}M", str(raw)], check=True)
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-L", "k3s-root", "-d", str(root), str(raw)],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(tmp_disk)],
            check=True,
            capture_output=True,
        )
        tmp_disk.chmod(0o444)  # the shared base is never written; overlays take the writes
        tmp_disk.rename(folder / "base.qcow2")
    finally:
        raw.unlink(missing_ok=True)
        tmp_disk.unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    done.unlink(missing_ok=True)
    say(f"built {folder / 'base.qcow2'} in {time.monotonic() - t0:.0f} s")
    img = find_debian_image()
    assert img is not None
    return img


def _apt_install(root: Path, packages: tuple[str, ...]) -> None:
    """``apt-get install`` in the root (chroot; the host's resolv.conf lent for the download)."""
    resolv = root / "etc" / "resolv.conf"
    saved = resolv.read_bytes() if resolv.is_file() and not resolv.is_symlink() else None
    resolv.unlink(missing_ok=True)
    shutil.copyfile("/etc/resolv.conf", resolv)
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    try:
        for args in (
            ["update", "-q"],
            ["install", "-y", "-q", "--no-install-recommends", *packages],
            ["clean"],
        ):
            res = subprocess.run(
                ["chroot", str(root), "apt-get", *args], capture_output=True, text=True, env=env
            )
            if res.returncode != 0:
                raise RuntimeUnavailable(
                    f"apt-get {args[0]} in the Debian root failed: {(res.stdout + res.stderr)[-2000:]}"
                )
    finally:
        resolv.unlink(missing_ok=True)
        if saved is not None:
            resolv.write_bytes(saved)


def _prepare_debian_root(root: Path) -> None:
    """What the guest needs beyond debootstrap: agent home, mount points, trimmed caches."""
    for d in ("home/user", "run/k3s", "proc", "sys", "dev", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc" / "hostname").write_text("sandbox\n")
    (root / "etc" / "hosts").write_text("127.0.0.1 localhost sandbox\n")
    (root / "etc" / "fstab").write_text("")
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for p in (root / cache).glob("*"):
            if p.is_file():
                p.unlink()


IMAGES = {"busybox": build_busybox_image, "debian": build_debian_image}


def get_image(name: str) -> Image:
    """The image called ``name``, built if needed.

    Raises:
        ValueError: unknown image name (lists the choices).
        RuntimeUnavailable: kernel or build tools missing.
    """
    try:
        builder = IMAGES[name]
    except KeyError:
        raise ValueError(f"unknown image {name!r}; choose one of {sorted(IMAGES)}") from None
    return builder()
