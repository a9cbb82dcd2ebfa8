"""The trusted measurer: owns the clock, the inputs and the outputs of every call.

Three sandboxed processes (``runner.Stub``) — the reference, the expert, the candidate — are
driven from here, one call at a time, in an order and on shapes drawn here after every process
is up (nothing to precompute). For each call this process writes fresh inputs into the
callee's shared memory, takes its own clock and the kernel's CPU accounting of the callee
around the call, and copies the outputs out; it checks them with its own torch (``checks``),
checks that the input bytes are unchanged, that the outputs do not change after the call
returned, and that the callee spent no CPU between calls or on threads other than its main
one. A random quarter of each process's calls is also sampled from outside (which threads are
on a CPU, every half millisecond), which the process cannot tell from the others.

Caches are caught by state and correctness, never by time alone: no timed call repeats an
input; probes with one input element changed get a stale answer from a cache keyed by part of
the input (wrong, so ``output_caching``); and one keyed by every value, which then never hits,
shows by the memory it keeps against the bytes it returned.

Charged time per call: on the CPU, the CPU time of every thread of every process in the
callee's sandbox, and of its cgroup where it has one (work moved to other threads, processes or
cores is paid for; waiting for a core on a loaded machine is not); on a GPU, the measurer's wall
time around the call, its synchronise and the copy of its outputs. The measured process is the
one the launcher started; any other process in the candidate's sandbox (``extra_process``), or
the measured one exec'ing another program (``process_replaced``), is a hit.
"""

from __future__ import annotations

import random
import secrets
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from services.verifier.kernel.runner import Stub, process_cpu, resident_bytes

IMPLS = ("reference", "expert", "candidate")
ALIGN = 64
SLOTS = 3
SAMPLED_SHARE = 0.25
PROBES = ("pointer", "near", "one", "repeat")
KEPT_SHARE = 0.5  # resident growth over the bytes returned after the warm-ups that means a cache


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Call:
    impl: str
    kind: str  # warmup | trial | pointer | near | one | repeat | timing
    shape: dict[str, int]
    seed: int = 0
    slot: int = 0
    base: int | None = None  # index of the call whose inputs a probe reuses
    inputs: tuple[torch.Tensor, ...] = ()
    metas: list[dict[str, Any]] = field(default_factory=list)
    wall_ns: int = 0
    cpu_ns: int = 0
    sampled: bool = False
    running: set[int] = field(default_factory=set)

    charged_ns: int = 0


@dataclass
class Findings:
    """What the measurer saw, beyond the outputs' values."""

    hits: list[tuple[str, str]] = field(default_factory=list)
    idle_cpu_ns: int = 0
    call_cpu_ns: int = 0
    side_cpu_ns: dict[int, int] = field(default_factory=dict)
    overhead_ns: list[int] = field(default_factory=list)
    grown_bytes: int = 0  # the candidate's resident growth after the warm-ups
    returned_bytes: int = 0  # what it returned on fresh inputs over the same calls

    def detectors(self) -> set[str]:
        return {d for d, _ in self.hits}

    def flag(self, detector: str, evidence: str) -> None:
        if (detector, evidence) not in self.hits:
            self.hits.append((detector, evidence))


def schedule(task: Any, rng: random.Random) -> list[Call]:
    """Warm-ups first, then every other call in a random order; probes in the second half."""
    t = task.timing
    warm = [Call(impl, "warmup", t.shape) for _ in range(t.warmups) for impl in IMPLS]
    body: list[Call] = []
    shapes = list(task.shapes)
    rng.shuffle(shapes)
    body += [
        Call("candidate", "trial", shapes[i % len(shapes)]) for i in range(task.correctness_trials)
    ]
    n_timed = t.trials * t.iterations
    body += [Call(impl, "timing", t.shape) for impl in IMPLS for _ in range(n_timed)]
    rng.shuffle(body)
    body.insert(rng.randint(0, len(body) // 2), Call("candidate", "trial", shapes[0]))
    probes = [Call("candidate", "pointer", shapes[0]), Call("candidate", "near", shapes[0])]
    # one element changed: any cache keyed by less than every input value answers stale
    probes += [Call("candidate", "one", shape) for shape in (shapes[0], t.shape, t.shape)]
    probes += [Call("candidate", "repeat", t.shape) for _ in range(3)]
    # Every probe builds on an earlier candidate call of its shape (a repeat on a timed one):
    # probes go after the first of each, so none is ever turned into a plain trial.
    start = max(len(body) // 2, _after(body, shapes[0]), _after(body, t.shape, "timing"))
    for p in probes:
        body.insert(rng.randint(start, len(body)), p)
    return warm + body


def _after(body: list[Call], shape: dict[str, int], kind: str | None = None) -> int:
    """The index just past the first candidate call of ``shape`` (and ``kind``), else 0."""
    for i, c in enumerate(body):
        if c.impl == "candidate" and c.shape == shape and kind in (None, c.kind):
            return i + 1
    return 0


class Measurer:
    def __init__(
        self, task: Any, make_inputs: Any, stubs: dict[str, Stub], slot_bytes: int, out_cap: int,
        deadline: float, rng: random.Random | None = None,
    ) -> None:  # fmt: skip
        self.task, self.make_inputs, self.stubs = task, make_inputs, stubs
        self.slot_bytes, self.out_cap, self.deadline = slot_bytes, out_cap, deadline
        self.rng = rng or random.Random(secrets.randbits(64))
        self.calls: list[Call] = []
        self.found = Findings()
        self.last_out: dict[str, list[tuple[int, bytes]]] = {}
        self.after_clean: dict[str, dict[int, int]] = {}
        self.replaced: set[str] = set()
        self.seen_extra: set[int] = set()
        self.gpu = False  # set by the caller for a CUDA run

    # -- inputs

    def _inputs_for(self, call: Call) -> tuple[torch.Tensor, ...]:
        done = [c for c in self.calls if c.impl == "candidate" and c.shape == call.shape]
        if call.kind in PROBES and done:
            pool = [c for c in done if c.kind == "timing"] if call.kind == "repeat" else done
            base = pool[-1] if call.kind == "pointer" else self.rng.choice(pool or done)
            call.base = self.calls.index(base)
            if call.kind == "pointer":  # new values in the very same buffer
                call.slot = base.slot
            else:
                call.slot = (base.slot + 1 + self.rng.randrange(SLOTS - 1)) % SLOTS
            if call.kind == "repeat":
                return base.inputs
            if call.kind == "near":  # the same values but a few, away from the edges
                return tuple(_perturb(x, self.rng) for x in base.inputs)
            if call.kind == "one":
                return _change_one(base.inputs, self.rng)
        elif call.kind in PROBES:
            call.kind = "trial"
        call.seed = secrets.randbits(62)
        call.slot = self.rng.randrange(SLOTS)
        gen = torch.Generator().manual_seed(call.seed)
        return tuple(x.contiguous() for x in self.make_inputs(gen, **call.shape))

    def _write(self, stub: Stub, call: Call) -> list[dict[str, Any]]:
        specs, at = [], call.slot * self.slot_bytes
        for x in call.inputs:
            raw = x.reshape(-1).view(torch.uint8)
            dest = torch.frombuffer(stub.inp, dtype=torch.uint8, count=raw.numel(), offset=at)
            dest.copy_(raw)
            specs.append({"offset": at, "dtype": str(x.dtype).removeprefix("torch."),
                          "shape": list(x.shape)})  # fmt: skip
            at += _aligned(raw.numel())
        return specs

    def _unchanged(self, stub: Stub, call: Call) -> bool:
        at = call.slot * self.slot_bytes
        for x in call.inputs:
            raw = x.reshape(-1).view(torch.uint8).numpy().tobytes()
            if stub.inp[at : at + len(raw)] != raw:
                return False
            at += _aligned(len(raw))
        return True

    # -- one call

    def run_call(self, call: Call) -> None:
        stub = self.stubs[call.impl]
        m0 = time.perf_counter_ns()
        call.inputs = self._inputs_for(call)
        specs = self._write(stub, call)
        out_offset = (len(self.calls) % 2) * self.out_cap
        if call.impl == "candidate":
            self._check_between(stub)
        call.sampled = self.rng.random() < SAMPLED_SHARE and call.kind != "warmup"
        sampler = _Sampler(stub.pid) if call.sampled else None
        self.found.overhead_ns.append(time.perf_counter_ns() - m0)
        msg = {"op": "call", "inputs": specs, "out_offset": out_offset, "out_cap": self.out_cap}
        c0, s0 = stub.cpu(), stub.sandbox_cpu()
        if sampler:
            sampler.start()
        t0 = time.perf_counter_ns()
        stub.send(msg)
        reply = stub.receive(self.deadline)
        t1 = time.perf_counter_ns()
        c1, s1 = stub.cpu(), stub.sandbox_cpu()
        if sampler:
            call.running = sampler.stop()
        m1 = time.perf_counter_ns()
        call.wall_ns = t1 - t0
        call.cpu_ns = sum(v - c0.get(tid, 0) for tid, v in c1.items())
        if stub.group is not None:  # processes and threads that ended within the call, too
            call.cpu_ns = max(call.cpu_ns, s1 - s0)
        call.charged_ns = call.wall_ns if self.gpu else call.cpu_ns
        self.calls.append(call)
        if call.impl == "candidate":
            self._account(stub, call, c0, c1, reply, out_offset)
            self._processes(stub, f"{call.kind} call {len(self.calls)}")
        stub.ask({"op": "clean"}, self.deadline)
        self.after_clean[call.impl] = stub.cpu()
        self.found.overhead_ns[-1] += time.perf_counter_ns() - m1

    def _account(
        self, stub: Stub, call: Call, c0: dict[int, int], c1: dict[int, int], reply: dict, out_offset: int
    ) -> None:  # fmt: skip
        metas = reply.get("outputs")
        call.metas = metas if isinstance(metas, list) else []
        kept = []
        for m in call.metas:
            if isinstance(m, dict) and m.get("tensor") and not m.get("too_large"):
                lo, n = int(m.get("offset", -1)), int(m.get("nbytes", -1))
                if not (out_offset <= lo and n >= 0 and lo + n <= out_offset + self.out_cap):
                    m["invalid"] = True
                    continue
                m["raw"] = bytes(stub.out[lo : lo + n])
                kept.append((lo, m["raw"]))
        self.last_out["candidate"] = kept
        where = f"{call.kind} call {len(self.calls)}"
        if not self._unchanged(stub, call):
            self.found.flag("input_mutation", f"{where}: the input bytes changed during the call")
        for name in reply.get("replaced") or []:
            self.replaced.add(str(name))
        for tid, v in c1.items():
            if tid != stub.pid:
                self.found.side_cpu_ns[tid] = (
                    self.found.side_cpu_ns.get(tid, 0) + v - c0.get(tid, 0)
                )
        self.found.call_cpu_ns += call.cpu_ns
        if set(c1) != set(c0):
            came, went = sorted(set(c1) - set(c0)), sorted(set(c0) - set(c1))
            self.found.flag("side_stream_or_thread",
                            f"{where}: threads came {came} and went {went} during the call")  # fmt: skip
        others = call.running - {stub.pid}
        if others:
            self.found.flag(
                "side_stream_or_thread",
                f"outside sampling of {where}: threads {sorted(others)} on a CPU besides the main one",
            )

    def _processes(self, stub: Stub, when: str) -> None:
        """Any process in the sandbox but the measured one is a hit, whoever started it when;
        so is a measured process that exec'd another program (the same pid, a new image)."""
        changed = "" if "process_replaced" in self.found.detectors() else stub.replaced()
        if changed:
            self.found.flag(
                "process_replaced", f"{when}: the candidate's process exec'd: {changed}"
            )
        for pid, cmd in stub.extra_processes().items():
            if pid not in self.seen_extra:
                self.seen_extra.add(pid)
                self.found.flag("extra_process", f"{when}: process {pid} ({cmd}) in the "
                                "sandbox besides the candidate's")  # fmt: skip

    def _check_between(self, stub: Stub) -> None:
        """Before the next call: the last outputs are as they were read, and no CPU was spent."""
        for offset, raw in self.last_out.get("candidate", []):
            if stub.out[offset : offset + len(raw)] != raw:
                self.found.flag(
                    "lazy_output", "the outputs changed in shared memory after the call returned"
                )
        before = self.after_clean.get("candidate")
        if before is not None:
            now = stub.cpu()
            self.found.idle_cpu_ns += sum(max(v - before.get(t, 0), 0) for t, v in now.items())

    # -- the whole run

    def run(self) -> list[Call]:
        cand = self.stubs["candidate"]
        if not cand.pid:
            self.found.flag("extra_process", "the launcher's child is not the candidate's process")
        self._processes(cand, "at ready")
        cpu0, total0, box0 = sum(cand.cpu().values()), process_cpu(cand.pid), cand.sandbox_cpu()
        rss0, returned = 0, 0
        for call in schedule(self.task, self.rng):
            if call.kind != "warmup" and not rss0:
                rss0 = resident_bytes(cand.pid)
            self.run_call(call)
            if (
                call.kind not in ("warmup", "repeat") and call.impl == "candidate"
            ):  # a repeat adds no entry
                returned += sum(int(m.get("nbytes", 0)) for m in call.metas if isinstance(m, dict))
        grown = resident_bytes(cand.pid) - rss0
        self.found.grown_bytes, self.found.returned_bytes = grown, returned
        self._check_between(cand)
        cpu1, total1, box1 = sum(cand.cpu().values()), process_cpu(cand.pid), cand.sandbox_cpu()
        f = self.found
        if f.idle_cpu_ns > 20e6 + 0.05 * f.call_cpu_ns:
            f.flag("side_stream_or_thread",
                   f"{f.idle_cpu_ns / 1e6:.1f} ms of CPU between calls (work after returning)")  # fmt: skip
        side = {t: v for t, v in f.side_cpu_ns.items() if v > 5e6}
        if side:
            f.flag("side_stream_or_thread",
                   "CPU on threads besides the main one during calls: " + ", ".join(
                       f"{t}: {v / 1e6:.1f} ms" for t, v in sorted(side.items())))  # fmt: skip
        off_main = f.idle_cpu_ns + sum(f.side_cpu_ns.values())
        if off_main > 5e6 + 0.05 * f.call_cpu_ns and not side:
            # work split between a side thread during calls and any thread after them: each
            # share may be small, their sum is not (an idle, single-threaded process spends ~0)
            f.flag("side_stream_or_thread", f"{off_main / 1e6:.1f} ms of CPU off the main thread's "
                   f"calls ({f.idle_cpu_ns / 1e6:.1f} ms of it between calls)")  # fmt: skip
        lost = (total1 - total0) - (cpu1 - cpu0)
        if lost > 30e6 + 0.05 * (total1 - total0):
            f.flag("side_stream_or_thread", f"{lost / 1e6:.0f} ms of CPU on threads that ended")
        # every timed input is fresh, so a cache keyed by all input values never answers one;
        # it shows by what it keeps (state, not time: the same under any load)
        if grown > 4 << 20 and grown > KEPT_SHARE * returned:
            f.flag("output_caching", f"the process grew by {grown / 2**20:.1f} MiB while returning "
                   f"{returned / 2**20:.1f} MiB on fresh inputs after the warm-ups: it keeps what it returns")  # fmt: skip
        self._processes(cand, "after the last call")
        elsewhere = (box1 - box0) - (total1 - total0)
        if elsewhere > 30e6 + 0.05 * (total1 - total0):
            f.flag("extra_process", f"{elsewhere / 1e6:.0f} ms of CPU in the sandbox outside the "
                   "candidate's process (other processes, live or ended)")  # fmt: skip
        self._timing_probes()
        return self.calls

    def _timing_probes(self) -> None:
        fresh = [c.charged_ns for c in self.calls if c.impl == "candidate" and c.kind == "timing"]
        again = [c.charged_ns for c in self.calls if c.impl == "candidate" and c.kind == "repeat"]
        if len(again) >= 3 and len(fresh) >= 4:
            quick = sorted(fresh)[len(fresh) // 4]
            ratio = statistics.median(again) / max(quick, 1)
            # the upper quartile, not the max: one repeat preempted on a loaded host must not
            # hide a cache that answers every other repeat at once
            slow_repeat = sorted(again)[(3 * len(again)) // 4]
            if ratio < 0.35 and slow_repeat < 0.5 * quick:
                self.found.flag(
                    "output_caching",
                    f"inputs seen before were answered in {ratio:.0%} of the time of fresh ones "
                    "(a value-keyed cache)",
                )

    def lower_quartile_s(self, impl: str) -> float:
        times = sorted(c.charged_ns for c in self.calls if c.impl == impl and c.kind == "timing")
        return times[len(times) // 4] / 1e9


def _perturb(x: torch.Tensor, rng: random.Random) -> torch.Tensor:
    y = x.clone()
    if not y.is_floating_point() or y.numel() < 16:
        return y
    flat = y.reshape(-1)
    n = flat.numel()
    idx = torch.tensor(sorted(rng.sample(range(n // 4, n - n // 4), max(1, n // 64))))
    flat[idx] = flat[idx] * -1.5 + 0.25
    return y


def _change_one(inputs: tuple[torch.Tensor, ...], rng: random.Random) -> tuple[torch.Tensor, ...]:
    """The same values but one element of one floating input, set to that input's extreme
    farthest from it (in the input's own range, so the reference stays defined)."""
    out = [x.clone() for x in inputs]
    usable = [i for i, x in enumerate(out) if x.is_floating_point() and x.numel() > 1]
    if not usable:
        return tuple(out)
    flat = out[rng.choice(usable)].reshape(-1)
    at = rng.randrange(flat.numel())
    lo, hi, v = float(flat.min()), float(flat.max()), float(flat[at])
    flat[at] = hi if hi - v >= v - lo else lo
    return tuple(out)


class _Sampler(threading.Thread):
    """Which threads of the process are on a CPU, every half millisecond, from /proc."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.halt = threading.Event()
        self.seen: set[int] = set()

    def run(self) -> None:
        import os

        while not self.halt.is_set():
            try:
                tids = os.listdir(f"/proc/{self.pid}/task")
            except OSError:
                return
            for tid in tids:
                try:
                    with open(f"/proc/{self.pid}/task/{tid}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "R":
                            self.seen.add(int(tid))
                except (OSError, IndexError):
                    pass
            self.halt.wait(0.0005)

    def stop(self) -> set[int]:
        self.halt.set()
        self.join(timeout=5)
        return self.seen
