"""Trusted kernel harness: runs inside the sandbox, beside the untrusted candidate.

Standalone on purpose (stdlib + torch + numpy only): the sandbox sees the host's Python and
torch read-only, never the project. It talks to the verifier over two pipes: frames out
(4-byte length, JSON header, raw payload) and JSON lines in. The verifier, outside the sandbox,
decides everything that matters: it sends the seeds only when a trial starts (after the
candidate is imported, so nothing can be precomputed), recomputes the reference and the fp64
oracle on its side, compares the raw output bytes it received, and times each phase with its
own clock. What this harness reports about the candidate's process (pointers, threads,
profiler ops, patched functions) are signals a candidate that attacks the harness itself could
forge; the outside checks are the ones it cannot.

Order of work: capture the timers, calibrate the device peaks, time the reference and the
expert, and only then import the candidate (its import cannot disturb those figures).
"""

from __future__ import annotations

import time

_CLOCK = time.perf_counter_ns  # captured before anything else is imported

import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402

import torch  # noqa: E402

REF_SENTINEL = 0x7FC0DEAD  # written over the in-sandbox reference's outputs before they are freed
POISON_SENTINEL = 0x7FC0BEEF  # written over freed blocks before each candidate call


def _originals() -> list[tuple[object, str, object]]:
    found: list[tuple[object, str, object]] = [
        (time, name, getattr(time, name))
        for name in (
            "perf_counter",
            "perf_counter_ns",
            "monotonic",
            "monotonic_ns",
            "time",
            "time_ns",
        )
    ]
    found.append((torch.cuda, "synchronize", torch.cuda.synchronize))
    found.append((torch.cuda.Event, "record", torch.cuda.Event.record))
    found.append((torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time))
    found.append((torch, "set_num_threads", torch.set_num_threads))
    return found


_ORIGINALS = _originals()
_SELF = sys.modules[__name__]


class Harness:
    def __init__(self, out_fd: int, in_fd: int, job: dict) -> None:
        self.out = os.fdopen(out_fd, "wb", buffering=0)
        self.inp = os.fdopen(in_fd, "rb")
        self.job = job
        self.device = torch.device(job["device"])
        self.cuda = self.device.type == "cuda"
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        self.flush_buf = torch.empty(job["flush_bytes"] // 4, device=self.device)
        task = job["task_dir"]
        self.ref_mod = _load(f"{task}/reference.py", "k3s_reference")
        self.expert = getattr(_load(f"{task}/expert.py", "k3s_expert"), job["entry_point"])
        self.poison_sizes: set[int] = set()

    # -- protocol

    def send(self, header: dict, payload: bytes = b"") -> None:
        header = dict(header, nbytes=len(payload))
        data = json.dumps(header).encode()
        self.out.write(struct.pack(">I", len(data)) + data + payload)

    def ask(self, what: str, **kw: object) -> dict:
        self.send({"type": "ask", "what": what, **kw})
        line = self.inp.readline()
        if not line:
            raise SystemExit("verifier closed the command pipe")
        return json.loads(line)

    # -- helpers

    def make(self, seed: int, shape: dict) -> tuple:
        gen = torch.Generator().manual_seed(seed)
        inputs = self.ref_mod.make_inputs(gen, **shape)
        return tuple(x.to(self.device) for x in inputs)

    def flush(self) -> None:
        """Cold caches: overwrite a buffer larger than the last-level cache."""
        self.flush_buf.fill_(1.0)
        self.sync()

    def poison(self, sentinel: int) -> None:
        """Fill blocks of the sizes outputs take with a sentinel and free them, so an output
        the candidate never writes (``torch.empty`` handed a recycled block) shows the sentinel.
        After the reference ran, the sentinel is the reference's: such blocks held its results."""
        blocks = []
        for n in sorted(self.poison_sizes):
            t = torch.empty(n // 4, dtype=torch.int32, device=self.device)
            t.fill_(_signed(sentinel))
            blocks.append(t)
        del blocks
        self.sync()

    def threads(self) -> dict:
        return {
            "native": len(os.listdir("/proc/self/task")),
            "python": threading.active_count(),
            "torch": torch.get_num_threads(),
        }

    def tampered(self) -> list[str]:
        hits = [
            f"{getattr(owner, '__name__', owner)}.{name}"
            for owner, name, fn in _ORIGINALS
            if getattr(owner, name) is not fn
        ]
        if _SELF._CLOCK is not _ORIGINALS[1][2]:
            hits.append("harness clock")
        return hits

    def snapshot(self, result: object, inputs: tuple) -> tuple[list[dict], bytes]:
        """Metadata and raw bytes of every returned tensor, copied the moment the call is over."""
        outs = result if isinstance(result, tuple | list) else (result,)
        metas, chunks = [], []
        in_ranges = [(x.data_ptr(), x.data_ptr() + x.untyped_storage().nbytes()) for x in inputs]
        for o in outs:
            if not isinstance(o, torch.Tensor):
                metas.append({"type": type(o).__name__, "tensor": False})
                continue
            meta = {
                "tensor": True,
                "type": f"{type(o).__module__}.{type(o).__qualname__}",
                "exact_tensor": type(o) is torch.Tensor,
                "dtype": str(o.dtype).removeprefix("torch."),
                "shape": list(o.shape),
                "stride": list(o.stride()),
                "device": o.device.type,
                "ptr": o.data_ptr(),
                "alias_input": any(lo <= o.data_ptr() < hi for lo, hi in in_ranges),
            }
            plain = torch.Tensor._make_subclass(torch.Tensor, o) if not meta["exact_tensor"] else o
            raw = plain.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
            meta["bytes"] = len(raw)
            self.poison_sizes.add(len(raw))
            metas.append(meta)
            chunks.append(raw)
        return metas, b"".join(chunks)

    def report(
        self, phase: str, seed: int, shape: dict, result: object, inputs: tuple, **extra: object
    ) -> None:
        metas, payload = self.snapshot(result, inputs)
        self.send(
            {
                "type": "output",
                "phase": phase,
                "seed": seed,
                "shape": shape,
                "outputs": metas,
                **extra,
            },
            payload,
        )

    # -- stages

    def calibrate(self) -> None:
        """Measured device peaks for the roofline: a large matmul and a copy of the task's bytes."""
        n = 512
        a = torch.randn(n, n, device=self.device)
        b = torch.randn(n, n, device=self.device)
        ts = []
        for _ in range(9):
            self.sync()
            t0 = _CLOCK()
            torch.mm(a, b)
            self.sync()
            ts.append(_CLOCK() - t0)
        flops = 2 * n**3 / (min(ts) / 1e9)  # the best seen: load only slows a run down
        half = max(int(self.job["roofline_bytes"]) // 2 // 4, 1 << 16)
        src = torch.randn(half, device=self.device)
        dst = torch.empty_like(src)
        ts = []
        for _ in range(9):
            self.sync()
            t0 = _CLOCK()
            dst.copy_(src)
            self.sync()
            ts.append(_CLOCK() - t0)
        bw = 2 * half * 4 / (min(ts) / 1e9)
        self.send({"type": "calibration", "peak_flops": flops, "peak_bytes_per_s": bw})

    def timed_phase(self, impl: str, fn) -> None:
        t = self.job["timing"]
        warm = self.ask("seeds", phase=impl, n=t["warmups"])
        for seed in warm["seeds"]:
            fn(*self.make(seed, warm["shape"]))
        self.sync()
        self.send({"type": "marker", "event": "begin", "impl": impl})
        times: list[int] = []
        for trial in range(t["trials"]):
            got = self.ask("seeds", phase=impl, n=t["iterations"], trial=trial)
            batches = [self.make(seed, got["shape"]) for seed in got["seeds"]]
            self.flush()
            snaps = []
            for inputs in batches:
                if self.cuda:
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    self.sync()
                    start.record()
                    out = fn(*inputs)
                    end.record()
                    self.sync()  # device-wide: work on side streams is inside the window
                    times.append(int(start.elapsed_time(end) * 1e6))
                else:
                    t0 = _CLOCK()
                    out = fn(*inputs)
                    times.append(_CLOCK() - t0)
                snaps.append(self.snapshot(out, inputs))
                del out
            for seed, (metas, payload) in zip(got["seeds"], snaps, strict=True):
                self.send(
                    {
                        "type": "output",
                        "phase": f"timing:{impl}",
                        "seed": seed,
                        "shape": got["shape"],
                        "outputs": metas,
                    },
                    payload,
                )
        self.send({"type": "marker", "event": "end", "impl": impl, "times_ns": times})

    def call_candidate(self, fn, inputs: tuple, stage: str) -> object:
        try:
            return fn(*inputs)
        except BaseException as exc:  # noqa: BLE001 - any failure of the candidate is a result
            self.send(
                {
                    "type": "error",
                    "stage": stage,
                    "message": "".join(traceback.format_exception(exc))[-4000:],
                }
            )
            raise SystemExit(0) from None

    def correctness(self, fn, baseline: dict) -> None:
        for index in range(self.job["correctness_trials"]):
            got = self.ask("trial", index=index)
            inputs = self.make(got["seed"], got["shape"])
            clones = tuple(x.clone() for x in inputs)
            if got["ref_first"]:
                ref = self.ref_mod.reference(*(x.clone() for x in inputs))
                for r in ref if isinstance(ref, tuple) else (ref,):
                    _fill_sentinel(r, REF_SENTINEL)
                del ref
                gc.collect()
                self.poison(REF_SENTINEL)
            else:
                self.poison(POISON_SENTINEL)
            out = self.call_candidate(fn, inputs, "call")
            self.sync()
            unchanged = all(_same_bits(a, b) for a, b in zip(inputs, clones, strict=True))
            self.report(
                "trial", got["seed"], got["shape"], out, inputs,
                index=index, ref_first=got["ref_first"], inputs_unchanged=unchanged,
                threads=self.threads(), baseline=baseline, tampered=self.tampered(),
            )  # fmt: skip
            del out
            if not got["ref_first"]:
                self.ref_mod.reference(*clones)  # candidate first, then the reference

    def probes(self, fn) -> None:
        """Caching probes: new values in the same buffers (pointer), new buffers of the same
        shape (shape), the same values in new buffers (fingerprint). Earlier outputs stay
        alive, so a shared pointer means a returned cached tensor."""
        got = self.ask("probe")
        shape = got["shape"]
        kept = []
        x = self.make(got["seeds"][0], shape)
        kept.append(self.call_candidate(fn, x, "call"))
        self.report("probe", got["seeds"][0], shape, kept[-1], x, probe="first")
        fresh = self.make(got["seeds"][1], shape)
        for a, b in zip(x, fresh, strict=True):
            a.copy_(b)
        kept.append(self.call_candidate(fn, x, "call"))
        self.report("probe", got["seeds"][1], shape, kept[-1], x, probe="pointer")
        y = self.make(got["seeds"][2], shape)
        kept.append(self.call_candidate(fn, y, "call"))
        self.report("probe", got["seeds"][2], shape, kept[-1], y, probe="shape")
        z = tuple(t.clone() for t in y)
        kept.append(self.call_candidate(fn, z, "call"))
        self.report("probe", got["seeds"][2], shape, kept[-1], z, probe="fingerprint")

    def profile(self, fn) -> None:
        got = self.ask("seeds", phase="profile", n=1)
        inputs = self.make(got["seeds"][0], got["shape"])
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            self.call_candidate(fn, inputs, "call")
            self.sync()
        self.send({"type": "profile", "ops": sorted({e.name for e in prof.events()})})

    def run(self) -> None:
        torch.set_num_threads(self.job["threads"])
        torch.mm(torch.randn(64, 64), torch.randn(64, 64))  # start torch's thread pool now
        self.send({"type": "hello", "torch": torch.__version__, "device": self.device.type})
        self.calibrate()
        self.timed_phase("reference", self.ref_mod.reference)
        self.timed_phase("expert", self.expert)
        gc.collect()
        baseline = self.threads()
        sys.path.insert(0, os.path.dirname(self.job["candidate"]))
        try:
            module = _load(self.job["candidate"], "candidate")
        except BaseException as exc:  # noqa: BLE001
            self.send(
                {
                    "type": "error",
                    "stage": "import",
                    "message": "".join(traceback.format_exception(exc))[-4000:],
                }
            )
            return
        fn = getattr(module, self.job["entry_point"], None)
        if not callable(fn):
            self.send(
                {
                    "type": "error",
                    "stage": "entry_point",
                    "message": f"no callable {self.job['entry_point']!r}",
                }
            )
            return
        self.correctness(fn, baseline)
        self.probes(fn)
        self.timed_phase("candidate", fn)
        self.send(
            {
                "type": "state",
                "threads": self.threads(),
                "baseline": baseline,
                "tampered": self.tampered(),
            }
        )
        self.profile(fn)
        self.send({"type": "done"})


def _signed(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def _fill_sentinel(t: object, value: int) -> None:
    if isinstance(t, torch.Tensor) and t.is_contiguous():
        raw = t.detach().reshape(-1).view(torch.uint8)
        n = raw.numel() // 4 * 4
        raw[:n].view(torch.int32).fill_(_signed(value))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    out_fd, in_fd, job_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    with open(job_path) as f:
        job = json.load(f)
    Harness(out_fd, in_fd, job).run()
