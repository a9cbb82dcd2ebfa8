"""Images of the process runtime: the host image (skeleton root with a private ``/etc`` over the
host's ``/usr``, of which only the folders in ``usr_dirs`` show) and template images built as layers on top of it.

A mixin of :class:`~services.sandbox.runtime.process.runtime.ProcessRuntime`; it uses the
runtime's ``root``, ``images_dir``, tools (``bwrap``, ``nsenter``, ``setpriv``) and ``_lock``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from services.sandbox.runtime.base import (
    CheckpointError,
    ExecRequest,
    Runtime,
    RuntimeUnavailable,
    SandboxSpec,
)
from services.sandbox.runtime.process.fstree import (
    _OPAQUE_XATTR,
    OVERLAYS,
)

BUILTIN_IMAGES = ("busybox", "debian", "host")
"""Image names that select the host image (skeleton root + host ``/usr``)."""

_SKIP_ETC = {"shadow", "shadow-", "gshadow", "gshadow-", "ssh", "ssl/private", "machine-id"}


class ImagesMixin(Runtime):
    """Host image, template images (:meth:`build_image`)."""

    guest_uid: int
    usr_dirs: tuple[str, ...]

    def _skeleton(self) -> Path:
        """The host image's root: empty top-level dirs, merged-/usr links, a copy of /etc."""
        skel = self.images_dir / "_host" / f"root-{self.guest_uid}"
        if (skel / ".k3s-ready").exists():
            return skel
        with self._lock:
            if (skel / ".k3s-ready").exists():
                return skel
            tmp = skel.with_name(f"root.tmp-{secrets.token_hex(4)}")
            tmp.mkdir(parents=True)
            for d in (
                "usr",
                "tmp",
                "root",
                "home/user",
                "proc",
                "dev",
                "sys",
                "run",
                "var/tmp",
                "var/log",
                "opt",
                "mnt",
                "srv",
            ):
                (tmp / d).mkdir(parents=True, exist_ok=True)
            os.chmod(tmp / "tmp", 0o1777)
            os.chmod(tmp / "var/tmp", 0o1777)
            for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
                host = Path("/") / name
                if host.is_symlink():
                    os.symlink(os.readlink(host), tmp / name)
                elif (Path("/usr") / name).is_dir():
                    os.symlink(f"usr/{name}", tmp / name)

            def ignore(folder: str, names: list[str]) -> set[str]:
                rel = os.path.relpath(folder, "/etc")
                return {
                    n
                    for n in names
                    if n in _SKIP_ETC or os.path.normpath(f"{rel}/{n}") in _SKIP_ETC
                }

            shutil.copytree(
                "/etc", tmp / "etc", symlinks=True, ignore=ignore, ignore_dangling_symlinks=True
            )
            (tmp / "etc" / "hostname").write_text("sandbox\n")
            (tmp / "etc" / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
            for dirpath, dirnames, filenames in os.walk(tmp):  # the guest's root owns its tree
                for name in [*dirnames, *filenames, ""]:
                    os.lchown(os.path.join(dirpath, name), self.guest_uid, self.guest_uid)
            (tmp / ".k3s-ready").write_text("1\n")
            if skel.exists():
                shutil.rmtree(skel)
            os.replace(tmp, skel)
        return skel

    def _image_layers(self, image: str) -> dict[str, list[Path]]:
        """Lower dirs of each overlay for ``image``, top layer first."""
        skel = self._skeleton()
        lowers: dict[str, list[Path]] = {"root": [], "usr": []}
        if image not in BUILTIN_IMAGES:
            meta = self.images_dir / image / "image.json"
            if not meta.exists():
                raise RuntimeUnavailable(
                    f"process image {image!r} is not built; build it as a template first "
                    f"(built-in images: {', '.join(BUILTIN_IMAGES)})"
                )
            for layer in json.loads(meta.read_text())["layers"]:
                for name in OVERLAYS:
                    lowers[name].append(Path(layer) / name)
        lowers["root"].append(skel)
        lowers["usr"] += [self._usr_mask(), Path("/usr")]
        return lowers

    def _usr_mask(self) -> Path:
        """A layer over the host's ``/usr`` that hides every folder not in ``usr_dirs``: each
        becomes an empty opaque folder the guest's root owns (so ``/usr/local`` starts empty
        and is the sandbox's to install into). Rebuilt when the host's ``/usr`` or the list
        changes."""
        hidden = sorted(
            e.name for e in os.scandir("/usr")
            if e.name not in self.usr_dirs and e.is_dir(follow_symlinks=False)
        )  # fmt: skip
        key = hashlib.sha256("\0".join([str(self.guest_uid), *hidden]).encode()).hexdigest()
        mask = self.images_dir / "_host" / f"usr-mask-{key[:16]}"
        if mask.is_dir():
            return mask
        with self._lock:
            if mask.is_dir():
                return mask
            tmp = mask.with_name(f"{mask.name}.tmp-{secrets.token_hex(4)}")
            tmp.mkdir(parents=True)
            for name in hidden:
                (tmp / name).mkdir()
                os.setxattr(tmp / name, _OPAQUE_XATTR, b"y")
                os.chown(tmp / name, self.guest_uid, self.guest_uid)
            os.replace(tmp, mask)
        return mask

    def image_env(self, image: str) -> dict[str, str]:
        """Environment a template's ENV steps set (empty for built-in images)."""
        meta = self.images_dir / image / "image.json"
        if image in BUILTIN_IMAGES or not meta.exists():
            return {}
        return dict(json.loads(meta.read_text()).get("env", {}))

    def has_image(self, image: str) -> bool:
        return image in BUILTIN_IMAGES or (self.images_dir / image / "image.json").exists()

    def build_image(
        self,
        name: str,
        base: str | None,
        steps: list[dict[str, Any]],
        log_line: Any = None,
    ) -> dict[str, Any]:
        """Build image ``name``: run ``steps`` in a sandbox of ``base``, keep its changes as a layer.

        Steps: ``{"type": "RUN", "args": ["cmd ..."]}`` (through ``/bin/sh -c``, must exit 0),
        ``{"type": "ENV", "args": ["KEY", "value"]}``. Returns the image description.
        """
        self._require()
        say = log_line or (lambda _line: None)
        base = base or "host"
        env = self.image_env(base)
        build_id = f"build-{name}-{secrets.token_hex(4)}"
        workdir = self.images_dir / ".builds" / build_id
        h = self.create(build_id, SandboxSpec(image=base, env=env), workdir)
        try:
            for i, step in enumerate(steps):
                kind = str(step.get("type", "")).upper()
                args = [str(a) for a in step.get("args", [])]
                say(f"step {i + 1}/{len(steps)}: {kind} {' '.join(args)}")
                if kind == "RUN":
                    res = self.exec(
                        h, ExecRequest(cmd=" ".join(args), env=env, cwd="/", timeout_s=1800)
                    )
                    for line in (res.stdout + res.stderr).splitlines()[-50:]:
                        say(line)
                    if res.exit_code != 0:
                        raise CheckpointError(
                            f"step {i + 1} ({kind} {' '.join(args)}) exited {res.exit_code}"
                            + (" (timed out)" if res.timed_out else "")
                        )
                elif kind == "ENV":
                    if len(args) != 2:
                        raise ValueError(f"step {i + 1}: ENV takes KEY and value, got {args}")
                    env[args[0]] = args[1]
                else:
                    raise ValueError(f"step {i + 1}: unknown step type {kind!r} (RUN, ENV)")
            self.stop(h)
            dest = self.images_dir / name
            layer = dest / "layer"
            if dest.exists():
                shutil.rmtree(dest)
            layer.mkdir(parents=True)
            for ov in OVERLAYS:
                os.replace(workdir / "upper" / ov, layer / ov)
            base_layers: list[str] = []
            if base not in BUILTIN_IMAGES:
                base_layers = json.loads((self.images_dir / base / "image.json").read_text())[
                    "layers"
                ]
            image = {"name": name, "base": base, "layers": [str(layer), *base_layers], "env": env}
            (dest / "image.json").write_text(json.dumps(image))
            say(f"image {name} ready")
            return image
        finally:
            self.destroy(h)

    def delete_image(self, name: str) -> None:
        if name not in BUILTIN_IMAGES:
            shutil.rmtree(self.images_dir / name, ignore_errors=True)
