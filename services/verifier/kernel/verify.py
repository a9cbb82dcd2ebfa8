"""Verify one kernel candidate against one task: static checks, a sandboxed run, outside checks.

Everything that decides the reward happens here, outside the sandbox: the seeds (sent only
when a trial starts), the reference and fp64 oracle values (recomputed from the seeds), the
comparison of the raw bytes the harness streamed out, and the wall-clock time of each timed
phase by this process's own clock.
"""

from __future__ import annotations

import importlib.util
import json
import math
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, Field

from services.verifier.kernel import runner
from services.verifier.kernel.reward import FORMULA, speed_reward
from services.verifier.kernel.spec import KernelTask, load_task
from services.verifier.kernel.static_check import check_source

HARNESS = Path(__file__).parent / "harness.py"
REF_SENTINEL = 0x7FC0DEAD
POISON_SENTINEL = 0x7FC0BEEF
MAX_CANDIDATE_BYTES = 4 << 20
FLUSH_BYTES = 32 << 20


class BadCandidate(ValueError):
    """The candidate cannot be verified at all (missing file, no entry point): a 4xx."""


class DetectorHit(BaseModel):
    detector: str
    evidence: str


class CheckResult(BaseModel):
    phase: str = Field(description="trial, probe or timing:candidate.")
    seed: int
    shape: dict[str, int]
    ok: bool
    detail: str = ""


class Timings(BaseModel):
    reference_s: float
    expert_s: float
    candidate_s: float
    roofline_s: float
    speedup_vs_reference: float
    speedup_vs_expert: float
    peak_flops: float
    peak_bytes_per_s: float
    outside_hidden_s: dict[str, float] = Field(
        description="Per phase: the verifier's wall-clock time of the phase minus the time the harness reported."
    )


class KernelResult(BaseModel):
    task: str
    reward: float
    correct: bool
    reason: str
    detectors: list[DetectorHit] = Field(default_factory=list)
    checks: list[CheckResult] = Field(default_factory=list)
    timings: Timings | None = None
    reward_formula: str = FORMULA
    profiler_ops: list[str] = Field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    verifier_overhead_s: float = Field(
        0.0, description="Time spent outside the sandbox checking outputs."
    )

    @property
    def detector_names(self) -> set[str]:
        return {d.detector for d in self.detectors}


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def candidate_files(path: Path) -> tuple[Path, list[Path]]:
    """(entry module, all sources) of a candidate file or directory; BadCandidate if unusable."""
    path = Path(path)
    if not path.exists():
        raise BadCandidate(f"candidate {path} does not exist")
    if path.is_file():
        if path.suffix != ".py":
            raise BadCandidate(f"candidate {path} is not a Python file")
        files, entry = [path], path
    else:
        files = sorted(p for p in path.rglob("*.py") if p.is_file())
        entry = path / "candidate.py"
        if not entry.is_file():
            if len(files) != 1:
                raise BadCandidate(
                    f"candidate directory {path} needs a candidate.py (found {len(files)} .py files)"
                )
            entry = files[0]
    total = sum(p.stat().st_size for p in files)
    if total > MAX_CANDIDATE_BYTES:
        raise BadCandidate(f"candidate sources are {total} bytes (at most {MAX_CANDIDATE_BYTES})")
    return entry, files


def static_hits(task: KernelTask, entry: Path, files: list[Path]) -> list[DetectorHit]:
    hits: list[DetectorHit] = []
    defines_entry = False
    for f in files:
        src = f.read_text(errors="replace")
        hits += [
            DetectorHit(detector=h.detector, evidence=h.evidence)
            for h in check_source(src, f.name, task.forbidden_calls)
        ]
        if f == entry:
            import ast

            try:
                tree = ast.parse(src)
            except SyntaxError:
                continue
            defines_entry = any(
                (
                    isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                    and n.name == task.entry_point
                )
                or (
                    isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == task.entry_point for t in n.targets)
                )
                or (
                    isinstance(n, ast.ImportFrom)
                    and any((a.asname or a.name) == task.entry_point for a in n.names)
                )
                for n in tree.body
            )
    if not defines_entry and not any(h.detector == "syntax_error" for h in hits):
        raise BadCandidate(
            f"candidate {entry.name} defines no {task.entry_point!r} (the task's entry point)"
        )
    return hits


class _Expected:
    """Reference and oracle values per (seed, shape), computed once in the verifier."""

    def __init__(self, task: KernelTask) -> None:
        self.task = task
        self.ref = _load_module(task.directory / "reference.py", f"k3s_ref_{task.name}")
        self.cache: dict[tuple[int, str], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}

    def inputs(self, seed: int, shape: dict[str, int]) -> tuple[torch.Tensor, ...]:
        return self.ref.make_inputs(torch.Generator().manual_seed(seed), **shape)

    def get(
        self, seed: int, shape: dict[str, int]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        key = (seed, json.dumps(shape, sort_keys=True))
        if key not in self.cache:
            inputs = self.inputs(seed, shape)
            ref = self.ref.reference(*inputs)
            if hasattr(self.ref, "oracle"):
                orc = self.ref.oracle(*inputs)
            else:
                orc = self.ref.reference(
                    *(x.double() if x.is_floating_point() else x for x in inputs)
                )
            as_list = lambda r: list(r) if isinstance(r, tuple | list) else [r]  # noqa: E731
            self.cache = (
                {key: (as_list(ref), as_list(orc))}
                if len(self.cache) > 64
                else {**self.cache, key: (as_list(ref), as_list(orc))}
            )
        return self.cache[key]


def _decode(meta: dict[str, Any], raw: bytes) -> torch.Tensor:
    dtype = getattr(torch, str(meta.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {meta.get('dtype')!r}")
    shape = [int(s) for s in meta["shape"]]
    if math.prod(shape) * torch.empty(0, dtype=dtype).element_size() != len(raw):
        raise ValueError(f"{len(raw)} bytes do not hold shape {shape} of {dtype}")
    return (
        torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
        if raw
        else torch.empty(shape, dtype=dtype)
    )


def _sentinels(raw: bytes) -> tuple[int, int]:
    words = np.frombuffer(raw[: len(raw) // 4 * 4], dtype=np.uint32)
    return int((words == REF_SENTINEL).sum()), int((words == POISON_SENTINEL).sum())


def _norm_err(y: torch.Tensor, oracle: torch.Tensor) -> float:
    o = oracle.double()
    scale = max(float(o.abs().max()) if o.numel() else 0.0, 1e-30)
    return float((y.double() - o).abs().max()) / scale if o.numel() else 0.0


def _low_precision_signature(y: torch.Tensor) -> str:
    """Values computed in float16/bfloat16 and cast back are exactly representable there; an
    fp32 computation's are almost never (about 1 in 2**13 for float16, 2**16 for bfloat16)."""
    if y.dtype not in (torch.float32, torch.float64) or y.numel() < 64:
        return ""
    flat = y.reshape(-1)
    flat = flat[:: max(1, flat.numel() // 4096)]  # a strided sample is enough for a share
    finite = flat[torch.isfinite(flat) & (flat != 0)]
    if finite.numel() < 64:
        return ""
    for low in (torch.bfloat16, torch.float16):
        share = float((finite.to(low).to(y.dtype) == finite).double().mean())
        if share > 0.9:
            return f"{share:.0%} of its values are exact {str(low).removeprefix('torch.')} numbers"
    return ""


class _Judge:
    """Checks one output frame against the expected values; collects detector hits."""

    def __init__(self, task: KernelTask, expected: _Expected) -> None:
        self.task, self.expected = task, expected
        self.hits: list[DetectorHit] = []
        self.checks: list[CheckResult] = []
        self.seen: dict[bytes, int] = {}  # output bytes -> seed that produced them

    def flag(self, detector: str, evidence: str) -> None:
        if not any(h.detector == detector and h.evidence == evidence for h in self.hits):
            self.hits.append(DetectorHit(detector=detector, evidence=evidence))

    def output(self, header: dict[str, Any], payload: bytes) -> bool:
        seed, shape, phase = int(header["seed"]), dict(header["shape"]), str(header["phase"])
        where = f"{phase} seed {seed}"
        ok, detail = self._compare(header, payload, seed, shape, where)
        self.checks.append(CheckResult(phase=phase, seed=seed, shape=shape, ok=ok, detail=detail))
        return ok

    def _compare(
        self, header: dict[str, Any], payload: bytes, seed: int, shape: dict, where: str
    ) -> tuple[bool, str]:
        tol = self.task.tolerance
        refs, oracles = self.expected.get(seed, shape)
        metas = header.get("outputs") or []
        if len(metas) != len(refs):
            return False, f"returned {len(metas)} outputs, expected {len(refs)}"
        offset, problems = 0, []
        for i, (meta, ref, orc) in enumerate(zip(metas, refs, oracles, strict=True)):
            if not meta.get("tensor"):
                self.flag(
                    "lazy_output", f"{where}: output {i} is a {meta.get('type')}, not a tensor"
                )
                return False, f"output {i} is not a tensor"
            if not meta.get("exact_tensor"):
                self.flag(
                    "lazy_output",
                    f"{where}: output {i} is a {meta.get('type')} (a tensor subclass)",
                )
            if meta.get("alias_input"):
                self.flag("input_mutation", f"{where}: output {i} lives in an input's memory")
            n = int(meta.get("bytes", -1))
            raw = payload[offset : offset + n]
            offset += max(n, 0)
            ref_hits, poison_hits = _sentinels(raw)
            if ref_hits:
                self.flag(
                    "reads_reference_output",
                    f"{where}: {ref_hits} words of the freed reference output",
                )
            if poison_hits:
                self.flag(
                    "uninitialized_output",
                    f"{where}: {poison_hits} words never written (poison sentinel)",
                )
            if meta.get("dtype") != str(ref.dtype).removeprefix("torch."):
                if meta.get("dtype") in {"float16", "bfloat16"}:
                    self.flag("lowered_precision", f"{where}: output {i} is {meta.get('dtype')}")
                problems.append(f"output {i} dtype {meta.get('dtype')} != {ref.dtype}")
                continue
            if list(meta.get("shape", [])) != list(ref.shape):
                problems.append(f"output {i} shape {meta.get('shape')} != {list(ref.shape)}")
                continue
            if list(meta.get("stride", [])) != list(ref.stride()):
                problems.append(
                    f"output {i} strides {meta.get('stride')} != {list(ref.stride())} (must be contiguous)"
                )
                continue
            try:
                got = _decode(meta, raw)
            except (ValueError, KeyError, TypeError) as exc:
                problems.append(f"output {i}: {exc}")
                continue
            if raw in self.seen and self.seen[raw] != seed:
                self.flag(
                    "output_caching",
                    f"{where}: output {i} repeats the output for seed {self.seen[raw]}",
                )
            self.seen.setdefault(raw, seed)
            low = _low_precision_signature(got)
            if low:
                self.flag("lowered_precision", f"{where}: output {i}: {low}")
            if not torch.allclose(got, ref, atol=tol.atol, rtol=tol.rtol):
                problems.append(
                    f"output {i} differs from the reference (max abs {float((got - ref).abs().max()):.3e})"
                )
                continue
            err, err_ref = _norm_err(got, orc), _norm_err(ref, orc)
            bound = max(tol.oracle_factor * err_ref, tol.oracle_floor)
            if err > bound:
                problems.append(
                    f"output {i} error {err:.2e} vs the fp64 oracle exceeds {bound:.2e}"
                )
        return (not problems), "; ".join(problems)


def _stage(
    task: KernelTask, entry: Path, files: list[Path], root: Path, job: dict[str, Any]
) -> Path:
    staging = root / "k3s"
    (staging / "task").mkdir(parents=True)
    (staging / "candidate").mkdir()
    shutil.copy(HARNESS, staging / "harness.py")
    for name in ("reference.py", "expert.py"):
        shutil.copy(task.directory / name, staging / "task" / name)
    base = entry.parent
    for f in files:
        dest = staging / "candidate" / f.relative_to(base)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
    job = dict(job, task_dir="/k3s/task", candidate=f"/k3s/candidate/{entry.relative_to(base)}")
    (staging / "job.json").write_text(json.dumps(job))
    for p in staging.rglob("*"):
        p.chmod(0o555 if p.is_dir() else 0o444)
    return staging


def verify_kernel(
    task_name: str,
    candidate: Path,
    *,
    device: str = "cpu",
    threads: int = 1,
    timing_overrides: dict[str, int] | None = None,
    timeout_s: float | None = None,
    static_checks: bool = True,
    progress: Callable[[float, str], None] | None = None,
) -> KernelResult:
    """Verify ``candidate`` (a .py file or a directory with candidate.py) on ``task_name``.

    Raises :class:`~services.verifier.kernel.spec.UnknownTask` or :class:`BadCandidate` for
    input that cannot be verified; any behaviour of the candidate itself is a result.
    ``static_checks=False`` runs the dynamic layer alone (tests prove each detector there);
    ``progress(fraction, message)`` hears of each stage (it may raise to stop the run)."""
    started = time.monotonic()
    task = load_task(task_name)
    if timing_overrides:
        task = task.model_copy(update={"timing": task.timing.model_copy(update=timing_overrides)})
    entry, files = candidate_files(candidate)
    hits = static_hits(task, entry, files)
    if hits and static_checks:
        return KernelResult(
            task=task.name, reward=0.0, correct=False, detectors=hits, wall_s=time.monotonic() - started,
            reason="flagged before running: " + ", ".join(sorted({h.detector for h in hits})),
        )  # fmt: skip
    expected = _Expected(task)
    out_bytes = [
        r.element_size() * r.numel()
        for s in [task.timing.shape, *task.shapes]
        for r in expected.get(0, s)[0]
    ]
    flops, nbytes = task.roofline_work()
    job = {
        "entry_point": task.entry_point, "device": device, "threads": threads,
        "timing": task.timing.model_dump(), "correctness_trials": task.correctness_trials,
        "roofline_bytes": nbytes, "flush_bytes": FLUSH_BYTES,
    }  # fmt: skip
    issued: dict[str, list[int]] = {}
    say = progress or (lambda _f, _m: None)
    stages = {"reference": (0.05, "timing the reference"), "expert": (0.15, "timing the expert"),
              "candidate": (0.6, "timing the candidate"), "profile": (0.9, "profiling the candidate")}  # fmt: skip

    def answer(ask: dict[str, Any]) -> dict[str, Any]:
        what = ask.get("what")
        if what == "trial":
            say(
                0.25 + 0.05 * int(ask.get("index", 0)),
                f"correctness trial {int(ask.get('index', 0)) + 1}",
            )
        elif what == "probe":
            say(0.55, "caching probes")
        elif ask.get("trial") is None and str(ask.get("phase")) in stages:
            say(*stages[str(ask.get("phase"))])
        if what == "trial":
            i = int(ask.get("index", 0))
            seed = secrets.randbits(62)
            issued.setdefault("trial", []).append(seed)
            return {
                "seed": seed,
                "shape": task.shapes[i % len(task.shapes)],
                "ref_first": i % 2 == 0,
            }
        if what == "probe":
            seeds = [secrets.randbits(62) for _ in range(3)]
            issued.setdefault("probe", []).extend(seeds)
            return {"seeds": seeds, "shape": task.shapes[0]}
        n = min(max(int(ask.get("n", 1)), 1), 1000)
        seeds = [secrets.randbits(62) for _ in range(n)]
        phase = str(ask.get("phase"))
        if ask.get("trial") is not None:
            issued.setdefault(f"timing:{phase}", []).extend(seeds)
        shape = task.shapes[0] if phase == "profile" else task.timing.shape
        return {"seeds": seeds, "shape": shape}

    with tempfile.TemporaryDirectory(prefix="k3s-kernel-") as tmp:
        staging = _stage(task, entry, files, Path(tmp), job)
        outcome = runner.run_sandboxed(
            staging, "/k3s/job.json", answer, timeout_s=timeout_s or task.timeout_s,
            max_payload=4 * max(out_bytes) + (1 << 20), threads=threads,
        )  # fmt: skip
    checked = time.monotonic()
    result = _judge(task, expected, outcome, issued, flops, nbytes)
    result.wall_s = time.monotonic() - started
    result.verifier_overhead_s = time.monotonic() - checked
    return result


def _fail(
    task: KernelTask, reason: str, outcome: runner.RunOutcome, hits: list[DetectorHit] | None = None
) -> KernelResult:
    return KernelResult(
        task=task.name, reward=0.0, correct=False, reason=reason, detectors=hits or [],
        stdout=outcome.stdout_tail[-4000:], stderr=outcome.stderr_tail[-4000:],
    )  # fmt: skip


def _judge(
    task: KernelTask,
    expected: _Expected,
    outcome: runner.RunOutcome,
    issued: dict[str, list[int]],
    flops: float,
    nbytes: float,
) -> KernelResult:
    frames = outcome.frames
    types = [f.header.get("type") for f in frames]
    if outcome.flooded:
        return _fail(
            task,
            f"output flood: the candidate wrote over {outcome.output_bytes} bytes to stdout/stderr",
            outcome,
        )
    if outcome.timed_out:
        return _fail(task, f"timeout: no result within {task.timeout_s:.0f} s (killed)", outcome)
    if outcome.protocol_error:
        return _fail(task, f"protocol violation: {outcome.protocol_error}", outcome)
    errors = [f.header for f in frames if f.header.get("type") == "error"]
    if errors:
        e = errors[0]
        stage = {
            "import": "import failed",
            "entry_point": "no entry point",
            "call": "candidate raised",
        }.get(str(e.get("stage")), "error")
        return _fail(task, f"{stage}: {str(e.get('message', ''))[-1500:]}", outcome)
    if "done" not in types:
        return _fail(
            task,
            f"the sandboxed run died (exit code {outcome.exit_code}) before finishing",
            outcome,
        )
    judge = _Judge(task, expected)
    calib = next(f.header for f in frames if f.header.get("type") == "calibration")
    markers: dict[tuple[str, str], runner.Frame] = {}
    received: dict[str, list[int]] = {}
    ptrs: list[tuple[str, int]] = []
    for f in frames:
        h = f.header
        kind = h.get("type")
        if kind == "marker":
            markers[(str(h.get("impl")), str(h.get("event")))] = f
        elif kind == "output":
            phase = str(h.get("phase"))
            if phase in ("timing:reference", "timing:expert"):
                received.setdefault(phase, []).append(int(h.get("seed", -1)))
                continue
            received.setdefault(phase.split(":")[0] if phase == "probe" else phase, []).append(
                int(h.get("seed", -1))
            )
            if not isinstance(h.get("seed"), int) or not isinstance(h.get("shape"), dict):
                return _fail(task, "protocol violation: output frame without seed/shape", outcome)
            if phase == "probe":
                for meta in h.get("outputs") or []:
                    p = meta.get("ptr")
                    if isinstance(p, int) and p and any(q == p for _, q in ptrs):
                        judge.flag(
                            "output_caching",
                            f"probe {h.get('probe')}: returned the storage an earlier call returned",
                        )
                    if isinstance(p, int):
                        ptrs.append((str(h.get("probe")), p))
            if phase == "trial":
                if not h.get("inputs_unchanged", False):
                    judge.flag(
                        "input_mutation", f"trial seed {h['seed']}: inputs changed by the call"
                    )
                _thread_checks(judge, h, f"trial seed {h['seed']}")
            try:
                judge.output(h, f.payload)
            except (KeyError, TypeError, ValueError) as exc:
                return _fail(task, f"protocol violation: malformed output frame ({exc})", outcome)
        elif kind == "state":
            _thread_checks(judge, h, "after timing")
        elif kind == "profile":
            ops = [str(o) for o in h.get("ops", [])]
            bad = sorted(set(ops) & set(task.forbidden_ops))
            if bad:
                judge.flag("reference_library_call", f"profiler saw {', '.join(bad)}")
    for phase in ("trial", "probe", "timing:candidate"):
        want = sorted(issued.get(phase, []))
        got = sorted(received.get(phase, []))
        if phase == "probe":
            got = sorted(set(got))
        if want != got:
            judge.flag(
                "protocol_violation", f"{phase}: outputs for {len(got)} seeds, {len(want)} issued"
            )
    profile_ops = next(
        (list(f.header.get("ops", [])) for f in frames if f.header.get("type") == "profile"), []
    )

    def median_time(impl: str) -> float:
        """Lower quartile of the timed calls: load on a shared machine only ever adds time."""
        times = sorted(markers[(impl, "end")].header["times_ns"])
        return times[len(times) // 4] / 1e9

    hidden: dict[str, float] = {}
    for impl in ("reference", "expert", "candidate"):
        begin, end = markers[(impl, "begin")], markers[(impl, "end")]
        hidden[impl] = (end.at_ns - begin.at_ns) / 1e9 - sum(end.header["times_ns"]) / 1e9
    reported_cand = sum(markers[("candidate", "end")].header["times_ns"]) / 1e9
    excess = hidden["candidate"] - max(hidden["reference"], hidden["expert"])
    if excess > max(reported_cand, hidden["reference"], 0.25):
        judge.flag(
            "timer_tampering",
            f"wall-clock cross-check: {excess:.3f} s of the candidate's timed phase is missing from its "
            f"reported {reported_cand:.3f} s",
        )
    t_ref, t_exp, t_cand = median_time("reference"), median_time("expert"), median_time("candidate")
    t_roof = max(flops / calib["peak_flops"], nbytes / calib["peak_bytes_per_s"])
    if t_cand < 0.5 * t_roof:
        judge.flag(
            "beyond_roofline",
            f"{t_cand * 1e6:.1f} us per call is under half the roofline {t_roof * 1e6:.1f} us",
        )
    timings = Timings(
        reference_s=t_ref, expert_s=t_exp, candidate_s=t_cand, roofline_s=t_roof,
        speedup_vs_reference=t_ref / t_cand, speedup_vs_expert=t_exp / t_cand,
        peak_flops=calib["peak_flops"], peak_bytes_per_s=calib["peak_bytes_per_s"], outside_hidden_s=hidden,
    )  # fmt: skip
    failed = [c for c in judge.checks if not c.ok]
    correct = not failed
    if judge.hits:
        reason = "flagged: " + ", ".join(sorted({h.detector for h in judge.hits}))
        reward = 0.0
    elif not correct:
        reason = f"incorrect: {len(failed)} of {len(judge.checks)} checks failed; first: {failed[0].phase}: {failed[0].detail}"
        reward = 0.0
    else:
        reward = speed_reward(t_ref, t_exp, t_roof, t_cand)
        reason = f"correct on {len(judge.checks)} checks; {t_ref / t_cand:.2f}x the reference, {t_exp / t_cand:.2f}x the expert"
    return KernelResult(
        task=task.name, reward=reward, correct=correct, reason=reason, detectors=judge.hits, checks=judge.checks,
        timings=timings, profiler_ops=profile_ops, stdout=outcome.stdout_tail[-4000:], stderr=outcome.stderr_tail[-4000:],
    )  # fmt: skip


def _thread_checks(judge: _Judge, h: dict[str, Any], where: str) -> None:
    threads, base = h.get("threads") or {}, h.get("baseline") or {}
    for key in ("native", "python"):
        if int(threads.get(key, 0)) > int(base.get(key, 0)):
            judge.flag(
                "side_stream_or_thread",
                f"{where}: {threads.get(key)} {key} threads, {base.get(key)} before the candidate",
            )
    if base and threads.get("torch") != base.get("torch"):
        judge.flag(
            "side_stream_or_thread",
            f"{where}: torch threads changed {base.get('torch')} -> {threads.get('torch')}",
        )
    for t in h.get("tampered") or []:
        judge.flag("timer_tampering", f"{where}: {t} was replaced")
