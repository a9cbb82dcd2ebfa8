"""The ``kubernetes`` runtime: a sandbox is a pod of a cluster (the official ``kubernetes``
client), behind the same Runtime interface as the others.

* **Pod per sandbox** ``k3s-<sandbox id>`` in the namespace ``k3stack-sandboxes`` (override
  with ``KUBECONFIG``'s context); limits from the spec (``resources.limits`` cpu/memory),
  ``restartPolicy: Never``, no service account token. The template image is a registry image
  the cluster can pull (``busybox`` -> ``IMAGES``): a cluster has no access to this host's
  image store, so locally built templates must be pushed first.
* **Commands** run over the API's exec stream (``connect_get_namespaced_pod_exec``, the
  ``v4.channel.k8s.io`` websocket): stdout/stderr as they come, the exit status from the
  status channel, bounded by ``timeout -s KILL``.
* **Files** over the same exec stream (``cat`` out; base64 in, in chunks).
* **Network**: a NetworkPolicy per sandbox selecting its pod: ``none`` denies all ingress and
  egress; ``allowlist`` allows egress only to each destination's address (the fence's pinned
  one in deployed mode) and port. Enforcement is the cluster's CNI (one without policy
  support ignores it, which the cluster operator must rule out).
* **Checkpoints** are not kept (no memory, no filesystem layer): ``checkpoint`` answers a
  CheckpointError and ``capabilities`` says so; pause is therefore refused.

No cluster exists on the machines this project is tested on: ``tests/sandbox/
test_kubernetes_runtime.py`` drives this code against a **stand-in**, a loopback server that
replays API exchanges written down as fixtures (``tests/sandbox/fixtures/k8s_exchanges.json``),
REST and exec websocket alike. ``available()`` is false until a kubeconfig or in-cluster
configuration loads.
"""

from __future__ import annotations

import base64
import json
import math
import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from services.sandbox.runtime.base import (
    CheckpointError,
    CheckpointManifest,
    ExecEvent,
    ExecRequest,
    ExecResult,
    FileInfo,
    GuestFileError,
    GuestFileNotFound,
    Runtime,
    RuntimeCapabilities,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxSpec,
    VMHandle,
    gather_exec,
)
from services.sandbox.runtime.docker import STAT, DockerRuntime

NAMESPACE = "k3stack-sandboxes"
IMAGES = {"busybox": "busybox:1.36.1"}
CHUNK = 48 * 1024  # base64 of it stays well inside an exec's argument limit
POD_START_S = 120.0


def pod_name(sandbox_id: str) -> str:
    return f"k3s-{sandbox_id}".lower()


def network_policy(sandbox_id: str, spec: SandboxSpec) -> dict[str, Any]:
    """The sandbox's NetworkPolicy: no ingress; egress only to the allowlist."""
    egress = []
    if spec.network.mode == "allowlist":
        for dest in spec.network.allow:
            host, port = dest.rsplit(":", 1)
            addr = spec.network.pinned.get(dest, host.strip("[]"))
            cidr = f"{addr}/128" if ":" in addr else f"{addr}/32"
            egress.append({"to": [{"ipBlock": {"cidr": cidr}}],
                           "ports": [{"protocol": "TCP", "port": int(port)}]})  # fmt: skip
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": pod_name(sandbox_id), "labels": {"k3stack.sandbox": sandbox_id}},
        "spec": {"podSelector": {"matchLabels": {"k3stack.sandbox": sandbox_id}},
                 "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": egress},
    }  # fmt: skip


def pod_manifest(sandbox_id: str, spec: SandboxSpec, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(sandbox_id), "labels": {"k3stack.sandbox": sandbox_id}},
        "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False,
            "containers": [{
                "name": "sandbox", "image": image, "workingDir": "/home/user",
                "command": ["/bin/sh", "-c", "mkdir -p /home/user; trap 'exit 0' TERM; "
                            "while :; do sleep 3600 & wait; done"],
                "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
                "resources": {"limits": {"cpu": str(spec.cpu), "memory": f"{spec.memory_mb}Mi"}},
            }],
        },
    }  # fmt: skip


def exit_status(status: str) -> int:
    """The exit code in an exec stream's status channel message."""
    if not status:
        return -1
    msg = json.loads(status)
    if msg.get("status") == "Success":
        return 0
    for cause in (msg.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause["message"])
    raise GuestFileError(f"exec failed: {msg.get('message', status)}")


class KubernetesRuntime(Runtime):
    """Sandboxes as pods of a Kubernetes cluster."""

    name = "kubernetes"
    capabilities = RuntimeCapabilities(memory_checkpoint=False, fork=False, network_allowlist=True)

    def __init__(self, root: Path, namespace: str = NAMESPACE, api_client: Any = None) -> None:
        """``api_client``: a configured ``kubernetes.client.ApiClient`` (tests pass one for
        the stand-in server); else the kubeconfig or in-cluster configuration is loaded."""
        self.root = Path(root)
        self.namespace = namespace
        self._api_client = api_client
        self._why = ""
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ cluster

    def _client(self) -> Any:
        with self._lock:
            if self._api_client is None:
                try:
                    from kubernetes import client, config
                except ImportError as exc:  # the sandbox extra is not installed
                    raise RuntimeUnavailable(
                        "kubernetes runtime unavailable: pip install kubernetes (sandbox extra)"
                    ) from exc

                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    try:
                        config.load_kube_config()
                    except Exception as exc:  # noqa: BLE001 - no configuration here
                        raise RuntimeUnavailable(
                            f"kubernetes runtime unavailable: no cluster configured ({exc})"
                        ) from exc
                self._api_client = client.ApiClient()
            return self._api_client

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._client())

    def available(self) -> tuple[bool, str]:
        try:
            self._core().read_namespace(self.namespace)
        except RuntimeUnavailable as exc:
            return False, str(exc)
        except Exception as exc:  # noqa: BLE001 - the API's answer, named
            return False, f"the cluster does not answer for namespace {self.namespace}: {exc}"
        return True, f"pods in namespace {self.namespace}; no checkpoints (files nor memory)"

    # ------------------------------------------------------------------ lifecycle

    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        from kubernetes import client

        image = IMAGES.get(spec.image)
        if image is None:
            raise RuntimeUnavailable(f"kubernetes runtime has no image {spec.image!r}; use busybox")
        core, net = self._core(), client.NetworkingV1Api(self._client())
        net.create_namespaced_network_policy(self.namespace, network_policy(sandbox_id, spec))
        core.create_namespaced_pod(self.namespace, pod_manifest(sandbox_id, spec, image))
        h = VMHandle(sandbox_id=sandbox_id, runtime=self.name, workdir=workdir, spec=spec,
                     data={"pod": pod_name(sandbox_id), "namespace": self.namespace})  # fmt: skip
        deadline = time.monotonic() + POD_START_S
        while True:
            phase = core.read_namespaced_pod(h.data["pod"], self.namespace).status.phase
            if phase == "Running":
                return h
            if phase in ("Failed", "Succeeded") or time.monotonic() > deadline:
                self.destroy(h)
                raise RuntimeUnavailable(f"pod {h.data['pod']} did not start (phase {phase})")
            time.sleep(0.5)

    def checkpoint(self, h: VMHandle, parent: CheckpointManifest | None, store: Any) -> CheckpointManifest:  # fmt: skip
        raise CheckpointError(
            "the kubernetes runtime keeps no checkpoints (pods are not snapshotted)"
        )

    def restore(self, sandbox_id: str, chain: list[CheckpointManifest], store: Any,
                workdir: Path) -> VMHandle:  # fmt: skip
        raise CheckpointError("the kubernetes runtime keeps no checkpoints to restore")

    def stop(self, h: VMHandle) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        for delete in (
            lambda: self._core().delete_namespaced_pod(
                h.data["pod"], self.namespace, grace_period_seconds=0
            ),  # fmt: skip
            lambda: client.NetworkingV1Api(self._client()).delete_namespaced_network_policy(
                h.data["pod"], self.namespace
            ),  # fmt: skip
        ):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def destroy(self, h: VMHandle) -> None:
        self.stop(h)

    def is_alive(self, h: VMHandle) -> bool:
        try:
            pod = self._core().read_namespaced_pod(h.data["pod"], self.namespace)
        except Exception:  # noqa: BLE001 - gone or no cluster
            return False
        return pod.status.phase == "Running"

    # ------------------------------------------------------------------ commands

    def _stream(self, h: VMHandle, argv: list[str]) -> Any:
        from kubernetes.client.rest import ApiException
        from kubernetes.stream import stream

        try:
            return stream(self._core().connect_get_namespaced_pod_exec, h.data["pod"],
                          self.namespace, command=argv, stderr=True, stdin=False, stdout=True,
                          tty=False, _preload_content=False)  # fmt: skip
        except ApiException as exc:
            raise SandboxNotRunning(f"pod {h.data['pod']}: {exc.reason}") from exc

    def exec_stream(self, h: VMHandle, req: ExecRequest) -> Iterator[ExecEvent]:
        if req.background or req.stdin:
            raise GuestFileError("kubernetes runtime: background and stdin execs are not supported")
        argv = req.full_argv()
        env = {**h.spec.env, **req.env}
        if env or req.cwd:
            exports = " ".join(f"export {k}={shlex.quote(v)};" for k, v in env.items())
            cwd = shlex.quote(req.cwd or "/home/user")
            argv = ["/bin/sh", "-c", f'{exports} cd {cwd} && exec "$@"', "sh", *argv]
        if req.timeout_s:
            argv = ["timeout", "-s", "KILL", str(max(1, math.ceil(req.timeout_s))), *argv]
        started = time.monotonic()
        resp = self._stream(h, argv)
        try:
            yield ExecEvent(kind="start", pid=None)
            while resp.is_open():
                resp.update(timeout=1)
                if resp.peek_stdout():
                    yield ExecEvent(kind="stdout", data=resp.read_stdout())
                if resp.peek_stderr():
                    yield ExecEvent(kind="stderr", data=resp.read_stderr())
            code = exit_status(resp.read_channel(3))
        finally:
            resp.close()
        timed_out = (
            bool(req.timeout_s) and code == 137 and time.monotonic() - started >= req.timeout_s
        )
        yield ExecEvent(kind="exit", exit_code=None if timed_out else code, timed_out=timed_out)

    def exec(self, h: VMHandle, req: ExecRequest) -> ExecResult:
        started = time.perf_counter()
        res = gather_exec(self.exec_stream(h, req))
        res.duration_ms = (time.perf_counter() - started) * 1000
        return res

    def kill_process(self, h: VMHandle, pid: int, signal: int = 15) -> None:
        if pid <= 1:
            raise GuestFileError(f"refusing to signal guest pid {pid}")
        self._sh(h, 'kill -"$0" "$1"', str(int(signal)), str(int(pid)))

    def _sh(self, h: VMHandle, script: str, *args: str) -> ExecResult:
        res = self.exec(
            h, ExecRequest(argv=["/bin/sh", "-c", script, *args], cwd="/", timeout_s=60)
        )
        if res.exit_code != 0:
            err = res.stderr.strip()
            if "No such file" in err or "can't open" in err:
                raise GuestFileNotFound(err)
            raise GuestFileError(err or f"exit {res.exit_code}")
        return res

    # ------------------------------------------------------------------ files

    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        out = self._sh(h, 'base64 "$0"', path).stdout
        data = base64.b64decode(out)
        return data if limit is None else data[:limit]

    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        self._sh(h, 'mkdir -p "$(dirname "$0")" && : > "$0"', path)
        for i in range(0, len(data), CHUNK):
            chunk = base64.b64encode(data[i : i + CHUNK]).decode()
            self._sh(h, 'echo "$1" | base64 -d >> "$0"', path, chunk)
        self._sh(h, 'chmod "$1" "$0"', path, f"{mode & 0o7777:o}")
        return self.stat(h, path)

    _info = staticmethod(DockerRuntime._info)  # the same ``stat -c`` line format

    def stat(self, h: VMHandle, path: str) -> FileInfo:
        return self._info(self._sh(h, f'{STAT} "$0"', path).stdout.strip())

    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        out = self._sh(
            h, f'cd "$0" && for f in * .[!.]*; do [ -e "$f" ] && {STAT} "$0/$f"; done; true', path
        )
        return [self._info(line) for line in out.stdout.splitlines() if line]

    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        self._sh(h, 'rm -f "$0"' if not recursive else 'rm -rf "$0"', path)


def make_runtime(root: Path) -> KubernetesRuntime:
    return KubernetesRuntime(root)


__all__ = ["KubernetesRuntime", "network_policy", "pod_manifest"]
