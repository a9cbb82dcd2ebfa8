"""The process one implementation runs in: the untrusted candidate's, or the reference's or the
expert's (each in a sandbox of its own; never two in one process).

Standalone on purpose (stdlib + torch only): the sandbox sees the host's Python and torch
read-only, never the project. Nothing here is trusted by the measurer. The measurer (outside
the sandbox) writes each call's inputs into shared memory this process maps, sends one command
per call on a pipe, takes the time around it with its own clock and the kernel's CPU
accounting, and reads the outputs back from shared memory; it compares them with its own
torch. What this process says about itself (replaced functions, decoys touched) is a
convenience that names a detector; the verdict never rests on it.

In a candidate's process, before its import: the task's forbidden library ops are replaced at
the dispatcher (every call, every backend key) by a kernel that trips a wire the measurer
reads and raises; and decoys stand where an attack looks for the harness, the reference or the
expert (``sys.modules``, ``gc``, ``__main__``): touching one trips the wire.
"""

from __future__ import annotations

import time

_TIME = {n: getattr(time, n) for n in ("perf_counter", "perf_counter_ns", "monotonic",
                                       "monotonic_ns", "time", "time_ns", "process_time")}  # fmt: skip

import ctypes  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402

POISON_SENTINEL = 0x7FC0BEEF  # written over each returned output once it is copied out
KEYS = ("CPU", "CUDA", "Autograd", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
        "MkldnnCPU", "SparseCPU", "SparseCUDA", "QuantizedCPU", "NestedTensorCPU", "Meta")  # fmt: skip
WATCHED = [(time, n) for n in _TIME] + [
    (torch, n) for n in ("equal", "allclose", "isclose", "set_num_threads", "from_numpy",
                         "frombuffer", "empty", "empty_like")] + [
    (torch.Tensor, n) for n in ("copy_", "equal", "__eq__", "data_ptr", "cpu", "contiguous")
]  # fmt: skip
_ORIGINAL = [(owner, name, getattr(owner, name)) for owner, name in WATCHED]
_FROMBUFFER, _SUBCLASS = torch.frombuffer, torch.Tensor._make_subclass


class Wire:
    """The tripwire: one line per event on a pipe the measurer reads."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def trip(self, what: str) -> None:
        try:
            os.write(self.fd, (what.replace("\n", " ")[:500] + "\n").encode())
        except OSError:
            pass  # a closed wire is itself seen by the measurer (no closing line)


def disable_ops(ops: list[str], wire: Wire) -> int:
    """Replace each forbidden aten op, every overload, on every backend key; the library
    handle is leaked so nothing reachable can undo it."""
    lib = torch._C._dispatch_library("IMPL", "aten", "", "", 0)
    done = 0
    for op in ops:
        name = op.split("::", 1)[-1]
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue

        def kernel(*_a: object, _op: str = op, **_k: object) -> None:
            wire.trip(f"forbidden {_op}")
            raise RuntimeError(f"{_op} is not available to candidates")

        for overload in packet.overloads():
            full = name if overload == "default" else f"{name}.{overload}"
            for key in KEYS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        lib.impl(full, key, kernel, False)
                        done += 1
                    except RuntimeError:
                        pass  # the op has no kernel of that kind to replace
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
    return done


def plant_decoys(entry_point: str, wire: Wire) -> list[tuple[object, str, object]]:
    """Modules and globals shaped like the reference, the expert and a harness clock."""

    def decoy(label: str):  # noqa: ANN202
        def fn(*args: object, **_k: object) -> object:
            wire.trip(f"decoy {label} called")
            first = next((a for a in args if isinstance(a, torch.Tensor)), torch.zeros(1))
            return torch.full_like(first, float("nan"))

        fn.__name__ = fn.__qualname__ = entry_point if "expert" in label else "reference"
        return fn

    ref = types.ModuleType("k3s_reference")
    ref.reference = decoy("reference")
    ref.oracle = decoy("oracle")
    ref.make_inputs = decoy("make_inputs")
    exp = types.ModuleType("k3s_expert")
    setattr(exp, entry_point, decoy("expert"))
    for mod in (ref, exp):
        sys.modules[mod.__name__] = mod
    main = sys.modules["__main__"]
    clock = _TIME["perf_counter_ns"]

    class Harness:
        ref_mod, expert = ref, getattr(exp, entry_point)

        def tampered(self) -> list[str]:
            return []

    main._CLOCK = clock
    main.Harness = Harness
    main.REFERENCE, main.EXPERT = ref, getattr(exp, entry_point)
    return [(main, "_CLOCK", clock), (Harness, "tampered", Harness.__dict__["tampered"]),
            (main, "Harness", Harness), (ref, "reference", ref.reference)]  # fmt: skip


def replaced(decoys: list[tuple[object, str, object]]) -> list[str]:
    def label(owner: object) -> str:
        return getattr(owner, "__name__", type(owner).__name__)

    out = [f"{label(o)}.{n}" for o, n, f in _ORIGINAL if getattr(o, n, None) is not f]
    for owner, name, value in decoys:
        got = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if got is not value:
            out.append(f"harness decoy {label(owner)}.{name}")
    return out


def _load(path: str, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _fill(t: torch.Tensor, value: int) -> None:
    if t.is_contiguous() and t.numel():
        raw = t.detach().reshape(-1).view(torch.uint8)
        n = raw.numel() // 4 * 4
        raw[:n].view(torch.int32).fill_(value - (1 << 32) if value >= 1 << 31 else value)


class Stub:
    def __init__(self, argv: list[str]) -> None:
        cmd_fd, rep_fd, in_fd, out_fd, wire_fd = (int(a) for a in argv[:5])
        with open(argv[5]) as f:
            self.job = json.load(f)
        self.cmd = os.fdopen(cmd_fd, "rb")
        self.rep = os.fdopen(rep_fd, "wb", buffering=0)
        self.inp = mmap.mmap(in_fd, 0)
        self.out = mmap.mmap(out_fd, 0)
        self.wire = Wire(wire_fd)
        self.device = torch.device(self.job["device"])
        self.kept: list[torch.Tensor] = []
        self.decoys: list[tuple[object, str, object]] = []

    def reply(self, msg: dict) -> None:
        self.rep.write((json.dumps(msg) + "\n").encode())

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def inputs(self, specs: list[dict]) -> tuple[torch.Tensor, ...]:
        got = []
        for s in specs:
            dtype = getattr(torch, s["dtype"])
            n = 1
            for d in s["shape"]:
                n *= d
            t = _FROMBUFFER(self.inp, dtype=dtype, count=n, offset=s["offset"])
            got.append(t.reshape(s["shape"]).to(self.device))
        return tuple(got)

    def outputs(self, result: object, offset: int, cap: int) -> list[dict]:
        outs = result if isinstance(result, tuple | list) else (result,)
        metas, at = [], offset
        for o in outs:
            if not isinstance(o, torch.Tensor):
                metas.append({"tensor": False, "type": type(o).__name__})
                continue
            plain = o if type(o) is torch.Tensor else _SUBCLASS(torch.Tensor, o)
            flat = plain.detach().contiguous().reshape(-1).view(torch.uint8)
            n = flat.numel()
            meta = {"tensor": True, "exact": type(o) is torch.Tensor,
                    "type": f"{type(o).__module__}.{type(o).__qualname__}",
                    "dtype": str(o.dtype).removeprefix("torch."), "shape": list(o.shape),
                    "stride": list(o.stride()), "offset": at, "nbytes": n}  # fmt: skip
            if at + n > offset + cap:
                meta["too_large"] = True
            else:
                dest = _FROMBUFFER(self.out, dtype=torch.uint8, count=n, offset=at)
                dest.copy_(flat.cpu())
                at += (n + 63) // 64 * 64
            metas.append(meta)
            self.kept.append(o)
        return metas

    def calibrate(self, nbytes: int) -> dict:
        """Device peaks for the roofline (trusted processes only): a matmul and a copy."""
        n, clock = 512, _TIME["perf_counter_ns"]
        a, b = torch.randn(n, n, device=self.device), torch.randn(n, n, device=self.device)
        src = torch.randn(max(nbytes // 8, 1 << 16), device=self.device)
        dst = torch.empty_like(src)
        best = []
        for fn in (lambda: torch.mm(a, b), lambda: dst.copy_(src)):
            ts = []
            for _ in range(9):
                self.sync()
                t0 = clock()
                fn()
                self.sync()
                ts.append(clock() - t0)
            best.append(min(ts) / 1e9)
        return {"peak_flops": 2 * n**3 / best[0], "peak_bytes_per_s": 2 * 4 * src.numel() / best[1]}

    def run(self) -> None:
        job = self.job
        torch.set_num_threads(job["threads"])
        if job["role"] == "candidate":
            disable_ops(job.get("forbidden_ops", []), self.wire)
            self.decoys = plant_decoys(job["entry_point"], self.wire)
            sys.path.insert(0, os.path.dirname(job["module"]))
        try:
            module = _load(job["module"], "candidate" if job["role"] == "candidate" else "impl")
            fn = getattr(module, job["entry_point"], None)
        except BaseException as exc:  # noqa: BLE001 - any failure of the candidate is a result
            self.reply({"type": "error", "stage": "import", "message": _tb(exc)})
            return
        if not callable(fn):
            self.reply({"type": "error", "stage": "entry_point",
                        "message": f"no callable {job['entry_point']!r}"})  # fmt: skip
            return
        self.reply({"type": "ready", "torch": torch.__version__})
        for line in self.cmd:
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "call":
                try:
                    out = fn(*self.inputs(cmd["inputs"]))
                    self.sync()
                    metas = self.outputs(out, cmd["out_offset"], cmd["out_cap"])
                except BaseException as exc:  # noqa: BLE001
                    self.reply({"type": "error", "stage": "call", "message": _tb(exc)})
                    return
                del out
                self.reply({"type": "done", "outputs": metas, "replaced": replaced(self.decoys)})
            elif op == "clean":  # outside the timed window: poison what the call returned
                for t in self.kept:
                    _fill(t, POISON_SENTINEL)
                self.kept.clear()
                self.reply({"type": "clean"})
            elif op == "calibrate":
                self.reply({"type": "calibration", **self.calibrate(int(cmd["bytes"]))})
            else:
                self.wire.trip("bye")
                self.reply({"type": "bye"})
                return


def _tb(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))[-4000:]


if __name__ == "__main__":
    Stub(sys.argv[1:]).run()
