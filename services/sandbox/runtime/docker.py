"""The ``docker`` runtime: a sandbox is a container on the local Docker Engine (the official
``docker`` SDK), what a laptop or a cluster node runs.

* **Template images** are built here, with no registry: the busybox template is ``docker
  import`` of a root filesystem made from the same static busybox the microVM image uses
  (``images/builder.py``), tagged ``k3stack-sandbox/busybox:<content digest>``.
* **Commands** are ``docker exec`` (streamed; bounded by busybox ``timeout -s KILL``); their
  pid is the host pid of the exec, so signals and a disconnected client's kill reach the whole
  process tree from the host. Background commands are started as on the other runtimes.
  Each command runs in its own pids and memory cgroups below the container's
  (``docker_cgroups.py``), so a fork bomb or a memory hog in one is stopped at its own limit
  and does not starve the next (a command the OOM killer ended says so on its stderr).
* **Files**: reads stream ``cat`` out of the container; writes are spooled to a host temp file
  (constant memory) and unpacked with ``put_archive``.
* **Checkpoint = ``docker commit``**: the filesystem as an image layer; memory and processes
  are **not** kept (``capabilities.memory_checkpoint`` is false and the API says so); restore
  and fork run new containers from that image.
* **Pause = commit + freeze** (``docker pause``, the cgroup freezer): the container's processes
  and memory stay, frozen; resume is ``docker unpause``. A paused container survives a service
  crash and is re-attached as paused; if it is gone, resume falls back to the commit.
  Checkpoint images live in the engine's image store on this host (not the object store).
* **Limits**: memory (``mem_limit``), CPU (``nano_cpus``) and pids (``pids_limit``) from the
  spec and ``guest_pids_max``; network ``none`` (no interface but loopback) or ``allowlist``:
  an internal network, an ``INPUT`` fence and one forwarder per destination (``docker_net.py``).

Containers, images and labels are prefixed ``k3stack-sbx``; containers survive a service crash
and are re-attached by ``adopt``.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shutil
import signal as signal_mod
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from services.sandbox.runtime import docker_net
from services.sandbox.runtime.base import (
    GUEST_HOME,
    CheckpointError,
    CheckpointManifest,
    ExecEvent,
    ExecRequest,
    ExecResult,
    FileInfo,
    GuestFileError,
    GuestFileNotFound,
    GuestFileTooLarge,
    Runtime,
    RuntimeCapabilities,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxSpec,
    VMHandle,
    gather_exec,
    normalize_guest_path,
)
from services.sandbox.runtime.docker_cgroups import DockerCommandCgroups, container_cgroups
from services.sandbox.runtime.portforward import NetnsForwards
from services.sandbox.runtime.process.execs import BG_SCRIPT, GUEST_PATH_ENV

PREFIX = "k3stack-sbx"
IMAGE_REPO = "k3stack-sandbox/busybox"
CHECKPOINT_REPO = "k3stack-sandbox/checkpoint"
KEEPALIVE = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"]
STAT = "stat -c '%f|%s|%Y|%n'"


def _busybox_rootfs_tar(out: Path, busybox: Path) -> None:
    """The busybox template's root: the static busybox, its applets as symlinks, /home/user."""
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    with tarfile.open(out, "w") as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.linkname, info.size = kind, mode, link, len(data)
            tar.addfile(info, _Bytes(data) if data else None)

        for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "tmp", "root", "home",
                  "home/user", "dev", "proc", "sys"):  # fmt: skip
            add(d, tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755)
        add("bin/busybox", tarfile.REGTYPE, 0o755, busybox.read_bytes())
        for name in applets.stdout.split():
            if name != "busybox":
                add(f"bin/{name}", tarfile.SYMTYPE, 0o777, link="busybox")
        add("etc/passwd", tarfile.REGTYPE, 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
        add("etc/group", tarfile.REGTYPE, 0o644, b"root:x:0:\n")


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        n = len(self.data) - self.pos if n < 0 else n
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out


class DockerRuntime(Runtime):
    """Sandboxes as containers of the local Docker Engine."""

    name = "docker"
    capabilities = RuntimeCapabilities(
        memory_checkpoint=False, fork=True, network_allowlist=True, freezer=True
    )
    guest_addresses = staticmethod(docker_net.guest_addresses)

    def __init__(self, root: Path, pids_max: int = 1024) -> None:
        self.root = Path(root)
        self.pids_max = pids_max
        self._client: Any = None
        self._lock = threading.Lock()
        self._images: dict[str, str] = {}
        self._execs: dict[str, set[int]] = {}
        self._nets: dict[str, docker_net.AllowlistNet] = {}  # container id -> its allowlist net
        self.cgroups = DockerCommandCgroups(pids_max)
        self.forwards = NetnsForwards()
        self.instance = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:12]
        """Labels this instance's checkpoint images: its GC removes only its own."""

    # ------------------------------------------------------------------ engine and images

    @property
    def client(self) -> Any:
        if self._client is None:
            import docker

            self._client = docker.from_env(timeout=120)
        return self._client

    def available(self) -> tuple[bool, str]:
        try:
            self.client.ping()
        except Exception as exc:  # noqa: BLE001 - any failure means "not here"
            return False, f"no Docker Engine answers ({exc}); apt-get install docker.io, dockerd"
        return (
            True,
            "containers on the local Docker Engine; checkpoints (docker commit) cover files only",
        )

    def _require(self) -> None:
        ok, why = self.available()
        if not ok:
            raise RuntimeUnavailable(f"docker runtime unavailable: {why}")

    def image_for(self, name: str) -> str:
        """The template image (built and imported once per content digest)."""
        from services.sandbox.images.builder import _digest, _static_busybox

        if name not in ("busybox", "debian"):
            raise RuntimeUnavailable(f"docker runtime has no image {name!r}; use busybox")
        with self._lock:
            if name in self._images:
                return self._images[name]
            busybox = _static_busybox()
            tag = f"{IMAGE_REPO}:{_digest(busybox.read_bytes(), b'docker-rootfs-v1')}"
            try:
                self.client.images.get(tag)
            except Exception:  # noqa: BLE001 - not imported yet
                self.root.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=self.root) as tmp:
                    tar = Path(tmp) / "rootfs.tar"
                    _busybox_rootfs_tar(tar, busybox)
                    repo, t = tag.split(":")
                    with open(tar, "rb") as fh:
                        self.client.api.import_image_from_data(fh.read(), repository=repo, tag=t)
            self._images[name] = tag
            return tag

    # ------------------------------------------------------------------ lifecycle

    def _container(self, h: VMHandle) -> Any:
        try:
            c = self.client.containers.get(h.data["container"])
        except Exception as exc:  # noqa: BLE001 - gone
            raise SandboxNotRunning(f"sandbox {h.sandbox_id}'s container is gone") from exc
        if c.status != "running":
            raise SandboxNotRunning(f"sandbox {h.sandbox_id}'s container is {c.status}")
        return c

    def _run(self, sandbox_id: str, spec: SandboxSpec, workdir: Path, image: str) -> VMHandle:
        self._require()
        workdir.mkdir(parents=True, exist_ok=True)
        net, network = None, {"network_mode": "none"}
        if spec.network.mode == "allowlist":
            net, hosts = docker_net.create_net(self.client, sandbox_id, spec, PREFIX)
            network = {"network": net.name, "extra_hosts": hosts}
        try:
            c = self.client.containers.run(
                image, KEEPALIVE, detach=True, name=f"{PREFIX}-{sandbox_id}-{uuid.uuid4().hex[:6]}",
                labels={"k3stack.sandbox": sandbox_id, "k3stack.instance": self.instance},
                hostname="sandbox", **network,
                mem_limit=f"{spec.memory_mb}m", nano_cpus=int(spec.cpu * 1e9),
                pids_limit=self.pids_max, working_dir=GUEST_HOME,
                environment={"PATH": GUEST_PATH_ENV, "HOME": "/root", **spec.env},
            )  # fmt: skip
        except BaseException:
            if net is not None:
                docker_net.remove_net(self.client, net)
            raise
        c.reload()
        data: dict[str, Any] = {"container": c.id, "image": image}
        if net is not None:
            with self._lock:
                self._nets[c.id] = net
            data["net"] = net.to_data()
            data["network"] = docker_net.guest_addresses(spec)
        return VMHandle(sandbox_id=sandbox_id, runtime=self.name, workdir=workdir, spec=spec,
                        pid=c.attrs["State"]["Pid"] or None, data=data)  # fmt: skip

    def close(self) -> None:
        """Forwarders end with this process; a kept container's are restarted by ``adopt``."""
        self.forwards.close()
        with self._lock:
            nets, self._nets = list(self._nets.values()), {}
        for net in nets:
            net.close()

    def adopt(self, h: VMHandle) -> bool:
        """A container left by a crashed service: alive, and its allowlist forwarders (which
        lived in that process) listening again."""
        if not self.is_alive(h):
            return False
        self._listen(h)
        return True

    def reap_orphans(self, keep: list[VMHandle], checkpoints: set[str]) -> dict[str, int]:
        """Containers of this instance (label ``k3stack.instance``) that are not ``keep``'s
        (a crash between ``run`` and the row's write, a ``down`` cut short), and checkpoint
        images of this instance no restorable checkpoint names (a killed sandbox's pause
        image): removed. Another instance's carry another label and are never touched."""
        mine = f"k3stack.instance={self.instance}"
        kept = {h.data.get("container") for h in keep}
        done = {"containers": 0, "images": 0}
        try:
            containers = self.client.containers.list(all=True, filters={"label": mine})
            images = self.client.images.list(name=CHECKPOINT_REPO, filters={"label": mine})
        except Exception:  # noqa: BLE001 - no engine: nothing of ours can be running there
            return done
        for c in containers:
            if c.id in kept:
                continue
            sid = c.labels.get("k3stack.sandbox", "")
            handle = VMHandle(sandbox_id=sid, runtime=self.name, workdir=self.root, spec=SandboxSpec(),
                              pid=None, data={"container": c.id})  # fmt: skip
            self.stop(handle)
            done["containers"] += 1
        for img in images:
            for tag in img.tags:
                repo, _, ck = tag.rpartition(":")
                if repo != CHECKPOINT_REPO or ck in checkpoints:
                    continue
                with contextlib.suppress(Exception):  # in use by a kept container: stays
                    self.client.images.remove(tag, force=False)
                    done["images"] += 1
        return done

    def _listen(self, h: VMHandle) -> None:
        """The allowlist fence and forwarders of a container this process did not start."""
        with self._lock:
            if "net" not in h.data or h.data["container"] in self._nets:
                return
        net = docker_net.AllowlistNet.from_data(h.data["net"])
        net.fence()
        net.forward()
        with self._lock:
            self._nets[h.data["container"]] = net

    def _status(self, h: VMHandle) -> str:
        try:
            return self.client.containers.get(h.data["container"]).status
        except Exception:  # noqa: BLE001 - gone or no engine
            return "gone"

    def freeze(self, h: VMHandle) -> None:
        try:
            self._container(h).pause()
        except SandboxNotRunning:
            raise
        except Exception as exc:  # noqa: BLE001 - the engine's error, named
            raise SandboxNotRunning(f"docker pause of {h.sandbox_id} failed: {exc}") from exc

    def thaw(self, h: VMHandle) -> None:
        status = self._status(h)
        try:
            if status == "paused":
                self.client.api.unpause(h.data["container"])
            elif status != "running":
                raise SandboxNotRunning(f"sandbox {h.sandbox_id}'s container is {status}")
        except SandboxNotRunning:
            raise
        except Exception as exc:  # noqa: BLE001 - the engine's error, named
            raise SandboxNotRunning(f"docker unpause of {h.sandbox_id} failed: {exc}") from exc
        self._listen(h)

    def is_frozen(self, h: VMHandle) -> bool:
        return self._status(h) == "paused"

    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        return self._run(sandbox_id, spec, workdir, self.image_for(spec.image))

    def checkpoint(
        self, h: VMHandle, parent: CheckpointManifest | None, store: Any
    ) -> CheckpointManifest:
        c = self._container(h)
        started = time.perf_counter()
        ck = f"ck{uuid.uuid4().hex[:16]}"
        try:
            img = c.commit(repository=CHECKPOINT_REPO, tag=ck, pause=True,
                           conf={"Labels": {"k3stack.instance": self.instance}})  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the engine's error, named
            raise CheckpointError(f"docker commit of {h.sandbox_id} failed: {exc}") from exc
        total = (time.perf_counter() - started) * 1000
        return CheckpointManifest(
            id=ck, parent_id=parent.id if parent else None, sandbox_id=h.sandbox_id,
            runtime=self.name, spec=h.spec, runtime_data={"image": img.id, "tag": f"{CHECKPOINT_REPO}:{ck}"},
            stats={"commit_ms": total, "total_ms": total, "downtime_ms": total},
        )  # fmt: skip

    def expose_port(self, h: VMHandle, port: int) -> str:
        """A host loopback forwarder whose connections are opened in the container's network
        namespace (its loopback: network ``none`` has no other interface)."""
        self._container(h)
        return self.forwards.expose(h.sandbox_id, int(h.pid or 0), port)

    def stop(self, h: VMHandle) -> None:
        self.forwards.close(h.sandbox_id)
        parents = container_cgroups(h.pid)
        try:
            self.client.containers.get(h.data["container"]).remove(force=True)
        except Exception:  # noqa: BLE001, S110 - already gone
            pass
        self.cgroups.sweep(parents)
        with self._lock:
            self._execs.pop(h.sandbox_id, None)
            net = self._nets.pop(h.data["container"], None)
        if net is None and "net" in h.data:  # a container this process did not start
            net = docker_net.AllowlistNet.from_data(h.data["net"])
        if net is not None:
            docker_net.remove_net(self.client, net)

    def restore(
        self, sandbox_id: str, chain: list[CheckpointManifest], store: Any, workdir: Path
    ) -> VMHandle:
        m = chain[-1]
        image = m.runtime_data.get("image")
        if m.runtime != self.name or not image:
            raise CheckpointError(f"checkpoint {m.id} is not a docker checkpoint")
        try:
            h = self._run(sandbox_id, m.spec, workdir, image)
        except RuntimeUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. the image was removed
            raise CheckpointError(f"cannot start from checkpoint {m.id}: {exc}") from exc
        return h.model_copy(update={"restored_from": m.id})

    def destroy(self, h: VMHandle) -> None:
        self.stop(h)
        shutil.rmtree(h.workdir, ignore_errors=True)

    def is_alive(self, h: VMHandle) -> bool:
        return self._status(h) == "running"

    # ------------------------------------------------------------------ garbage collection

    def referenced_keys(self, m: CheckpointManifest, store: Any) -> set[str]:
        """A docker checkpoint's body is an image in the engine, named as a pseudo key."""
        tag = m.runtime_data.get("tag")
        return {f"docker-image:{tag}"} if tag else set()

    def collect_local(self, referenced: set[str], grace_s: float) -> tuple[int, int]:
        """Remove this instance's checkpoint images no reachable checkpoint names, older than
        ``grace_s`` (another instance's images carry another label and are never touched)."""
        try:
            images = self.client.images.list(
                name=CHECKPOINT_REPO, filters={"label": f"k3stack.instance={self.instance}"}
            )
        except Exception:  # noqa: BLE001 - no engine: nothing to collect
            return 0, 0
        files = freed = 0
        cutoff = time.time() - grace_s
        for img in images:
            tags = [t for t in img.tags if t.startswith(CHECKPOINT_REPO + ":")]
            created = img.attrs.get("Created", "")
            try:
                made = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
            except ValueError:
                made = 0.0
            if made > cutoff or any(f"docker-image:{t}" in referenced for t in tags):
                continue
            for t in tags:
                try:
                    self.client.images.remove(t, force=False)
                    files += 1
                except Exception:  # noqa: BLE001, S110 - in use by a container: kept
                    pass
            freed += int(img.attrs.get("Size", 0)) if tags else 0
        return files, freed

    # ------------------------------------------------------------------ commands

    def _argv(self, req: ExecRequest) -> list[str]:
        argv = req.full_argv()
        if req.timeout_s:
            argv = ["timeout", "-s", "KILL", str(max(1, math.ceil(req.timeout_s))), *argv]
        if req.stdin:
            argv = ["/bin/sh", "-c", 'exec "$@" < "$0"', "/tmp/.k3s/stdin", *argv]
        return argv

    def exec(self, h: VMHandle, req: ExecRequest) -> ExecResult:
        started = time.perf_counter()
        if req.background:
            fg = req.model_copy(update={"argv": ["/bin/sh", "-c", BG_SCRIPT, "sh", *req.full_argv()],
                                        "cmd": None, "background": False, "timeout_s": 30})  # fmt: skip
            res = self.exec(h, fg)
            if res.exit_code != 0 or not res.stdout.strip().isdigit():
                raise GuestFileError(f"could not start background command: {res.stderr.strip()}")
            return ExecResult(pid=int(res.stdout.strip()),
                              duration_ms=(time.perf_counter() - started) * 1000)  # fmt: skip
        result = gather_exec(self.exec_stream(h, req))
        result.duration_ms = (time.perf_counter() - started) * 1000
        return result

    def _raw_exec(self, h: VMHandle, argv: list[str], env: dict[str, str], cwd: str) -> tuple:
        c = self._container(h)
        api = self.client.api
        ex = api.exec_create(c.id, argv, environment=env, workdir=cwd)
        stream = api.exec_start(ex["Id"], stream=True, demux=True)
        pid = 0
        deadline = time.monotonic() + 15  # a loaded engine may take a while to say; a gated
        while not pid and time.monotonic() < deadline:  # command waits for it meanwhile
            pid = api.exec_inspect(ex["Id"]).get("Pid") or 0
            if not pid:
                time.sleep(0.005)
        return ex["Id"], stream, pid

    def exec_stream(self, h: VMHandle, req: ExecRequest) -> Iterator[ExecEvent]:
        if req.background:
            yield ExecEvent(kind="start", pid=self.exec(h, req).pid)
            return
        if req.stdin:
            self.write_file(h, "/tmp/.k3s/stdin", req.stdin, 0o600)
        cwd = normalize_guest_path(req.cwd or GUEST_HOME)
        env = {**h.spec.env, **req.env}
        started = time.monotonic()
        cg = self.cgroups.command(h.pid)
        try:
            ex_id, stream, pid = self._raw_exec(
                h, self.cgroups.gated(cg, self._argv(req)), env, cwd
            )
        except BaseException:
            self.cgroups.release(cg)
            raise
        if cg is not None and not (pid and self.cgroups.enter(cg, pid)):
            _kill_tree(pid, signal_mod.SIGKILL)  # the gate would wait; never run it unbounded
        with self._lock:
            self._execs.setdefault(h.sandbox_id, set()).add(pid)
        cap = req.max_output_bytes or (16 << 20)
        sizes = {"stdout": 0, "stderr": 0}
        try:
            yield ExecEvent(kind="start", pid=pid)
            for out, err in stream:
                for name, chunk in (("stdout", out), ("stderr", err)):
                    if not chunk:
                        continue
                    room = cap - sizes[name]
                    sizes[name] += len(chunk)
                    if room > 0:
                        yield ExecEvent(kind=name, data=chunk[:room].decode("utf-8", "replace"))  # type: ignore[arg-type]
            oom = self.cgroups.oom_note(cg)
        except GeneratorExit:
            _kill_tree(pid, signal_mod.SIGKILL)
            raise
        finally:
            with self._lock:
                self._execs.get(h.sandbox_id, set()).discard(pid)
            self.cgroups.release(cg)
        if oom:
            yield ExecEvent(kind="stderr", data=oom)
        code = self.client.api.exec_inspect(ex_id).get("ExitCode")
        timed_out = (
            bool(req.timeout_s) and code == 137 and time.monotonic() - started >= req.timeout_s
        )
        truncated = any(n > cap for n in sizes.values())
        yield ExecEvent(kind="exit", exit_code=None if timed_out else code, timed_out=timed_out,
                        truncated=truncated)  # fmt: skip

    def kill_process(self, h: VMHandle, pid: int, signal: int = 15) -> None:
        if pid <= 1:
            raise GuestFileError(f"refusing to signal guest pid {pid}")
        with self._lock:
            own = pid in self._execs.get(h.sandbox_id, set())
        if own:  # a streamed exec: its host pid
            _kill_tree(pid, int(signal))
            return
        # the group first; the lone process only if there is no such group (a group kill
        # that reaped it already would make a second kill fail)
        script = f"kill -{int(signal)} -- -{int(pid)} 2>/dev/null || kill -{int(signal)} {int(pid)}"
        res = self.exec(h, ExecRequest(argv=["/bin/sh", "-c", script], cwd="/", timeout_s=10))
        if res.exit_code != 0:
            raise GuestFileNotFound(f"no guest process {pid}", 3, str(pid))

    # ------------------------------------------------------------------ files

    def _sh(self, h: VMHandle, script: str, *args: str) -> ExecResult:
        req = ExecRequest(argv=["/bin/sh", "-c", script, "sh", *args], cwd="/", timeout_s=60)
        return self.exec(h, req)

    @staticmethod
    def _fail(res: ExecResult, path: str) -> None:
        msg = res.stderr.strip() or f"exit {res.exit_code}"
        if "No such file" in msg or "can't open" in msg or "not found" in msg:
            raise GuestFileNotFound(f"{path}: no such file or directory", 2, path)
        if "Is a directory" in msg:
            raise GuestFileError(f"{path}: is a directory", 21, path)
        raise GuestFileError(f"{path}: {msg}", 0, path)

    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        return b"".join(self.read_file_stream(h, path, limit))

    def read_file_stream(self, h: VMHandle, path: str, limit: int | None = None) -> Iterator[bytes]:
        p = normalize_guest_path(path)
        script = 'if [ -d "$1" ]; then echo "Is a directory" >&2; exit 21; fi; exec cat -- "$1"'
        ex_id, stream, pid = self._raw_exec(h, ["/bin/sh", "-c", script, "sh", p], {}, "/")
        sent, err, done = 0, b"", False
        try:
            for out, e in stream:
                err += (e or b"")[:4096]
                if out:
                    sent += len(out)
                    if limit is not None and sent > limit:
                        raise GuestFileTooLarge(f"{p} is larger than {limit} bytes", 27, p)
                    yield out
            done = True
        finally:
            if not done:  # stopped early (limit, consumer gone): end the cat and its stream
                _kill_tree(pid, signal_mod.SIGKILL)
                close = getattr(stream, "close", None)
                if close is not None:
                    close()  # the engine's attach connection, not left for the collector
        code = self.client.api.exec_inspect(ex_id).get("ExitCode")
        if code:
            self._fail(ExecResult(exit_code=code, stderr=err.decode("utf-8", "replace")), p)

    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        return self.write_file_stream(h, path, [data], mode)

    def write_file_stream(
        self, h: VMHandle, path: str, chunks: Iterable[bytes], mode: int = 0o644
    ) -> FileInfo:
        p = normalize_guest_path(path)
        parent, name = p.rsplit("/", 1)
        parent = parent or "/"
        res = self._sh(h, 'mkdir -p "$1" && [ ! -d "$2" ]', parent, p)
        if res.exit_code != 0:
            raise GuestFileError(f"{p}: is a directory or its parent cannot be made", 21, p)
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:  # spooled: constant memory
            body = Path(tmp) / "body"
            with open(body, "wb") as fh:
                for chunk in chunks:
                    fh.write(chunk)
            tar_path = Path(tmp) / "body.tar"
            with tarfile.open(tar_path, "w") as tar:
                info = tar.gettarinfo(str(body), arcname=name)
                info.mode, info.uid, info.gid, info.uname, info.gname = mode, 0, 0, "root", "root"
                with open(body, "rb") as fh:
                    tar.addfile(info, fh)
            with open(tar_path, "rb") as fh:
                ok = self.client.api.put_archive(self._container(h).id, parent, fh)
        if not ok:
            raise GuestFileError(f"{p}: the engine refused the upload", 0, p)
        return self.stat(h, p)

    @staticmethod
    def _info(line: str) -> FileInfo:
        raw, size, mtime, path = line.split("|", 3)
        mode = int(raw, 16)
        kind = mode & 0o170000
        return FileInfo(path=path, name=path.rsplit("/", 1)[-1] or "/", size=int(size),
                        mode=mode & 0o7777, is_dir=kind == 0o040000,
                        is_symlink=kind == 0o120000, mtime=float(mtime))  # fmt: skip

    def stat(self, h: VMHandle, path: str) -> FileInfo:
        p = normalize_guest_path(path)
        res = self._sh(h, f'{STAT} -- "$1"', p)
        if res.exit_code != 0:
            self._fail(res, p)
        return self._info(res.stdout.strip())

    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        p = normalize_guest_path(path)
        script = (f'[ -d "$1" ] || {{ [ -e "$1" ] && echo "Not a directory" >&2 || '
                  f'echo "No such file" >&2; exit 2; }}; '
                  f'find "$1" -mindepth 1 -maxdepth 1 -exec {STAT} {{}} +')  # fmt: skip
        res = self._sh(h, script, p)
        if res.exit_code != 0:
            self._fail(res, p)
        return sorted((self._info(x) for x in res.stdout.splitlines() if x), key=lambda i: i.name)

    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        p = normalize_guest_path(path)
        script = '[ -e "$1" ] || [ -L "$1" ] || { echo "No such file" >&2; exit 2; }; '
        script += (
            'rm -rf -- "$1"'
            if recursive
            else 'if [ -d "$1" ]; then rmdir -- "$1"; else rm -f -- "$1"; fi'
        )
        res = self._sh(h, script, p)
        if res.exit_code != 0:
            self._fail(res, p)


def _kill_tree(pid: int, sig: int) -> None:
    """Signal a host process and everything below it (an exec's tree, from the host)."""
    if not pid:
        return
    try:
        import psutil

        proc = psutil.Process(pid)
        procs = [*proc.children(recursive=True), proc]
    except Exception:  # noqa: BLE001 - gone already
        return
    for p in procs:
        try:
            os.kill(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
