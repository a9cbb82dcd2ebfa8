"""Verify one kernel candidate against one task: static checks, then the measured run.

The candidate runs alone in a sandboxed process of its own; the reference and the expert in two
others (``runner.Stub``). This process is the trusted measurer (``measure.Measurer``): it owns
the clock, writes every input, reads every output and checks it with its own torch
(``checks.OutputJudge``). What the candidate's process says about itself only ever adds
detectors; nothing it says can earn reward.
"""

from __future__ import annotations

import importlib.util
import random
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch
from pydantic import BaseModel, Field

from services.verifier.kernel.checks import CheckResult, DetectorHit, OutputJudge
from services.verifier.kernel.measure import ALIGN, SLOTS, Measurer, _aligned
from services.verifier.kernel.reward import FORMULA, speed_reward
from services.verifier.kernel.runner import Stub, StubDied
from services.verifier.kernel.spec import KernelTask, load_task
from services.verifier.kernel.static_check import check_source

STUB = Path(__file__).parent / "stub.py"
MAX_CANDIDATE_BYTES = 4 << 20
CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
          "process_time", "_CLOCK", "tampered"}  # fmt: skip
COMPARISONS = {"equal", "allclose", "isclose", "__eq__"}


class BadCandidate(ValueError):
    """The candidate cannot be verified at all (missing file, no entry point): a 4xx."""


class Timings(BaseModel):
    reference_s: float
    expert_s: float
    candidate_s: float
    roofline_s: float
    speedup_vs_reference: float
    speedup_vs_expert: float
    peak_flops: float
    peak_bytes_per_s: float
    candidate_wall_s: float = Field(
        description="Lower quartile of the candidate's wall times alone."
    )
    calls: int = Field(description="Calls the measurer made, all three processes together.")
    measurer_overhead_s: float = Field(
        description="Median time per call the measurer spends outside the call (inputs, reading back)."
    )
    idle_cpu_s: float = Field(description="CPU the candidate's process used between calls.")


class KernelResult(BaseModel):
    task: str
    reward: float
    correct: bool
    reason: str
    failed_check: str = Field(
        "",
        description="For a zero without a detector: the check that failed (value, oracle, dtype, "
        "shape, stride, outputs, tensor, fit, decode, no_output) or how the run ended (timeout, "
        "flood, died, protocol, error:<stage>); a cheat names its detectors instead.",
    )
    detectors: list[DetectorHit] = Field(default_factory=list)
    checks: list[CheckResult] = Field(default_factory=list)
    timings: Timings | None = None
    reward_formula: str = FORMULA
    tripwire: list[str] = Field(
        default_factory=list, description="What the candidate's process tripped."
    )
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    verifier_overhead_s: float = Field(
        0.0, description="Time spent checking outputs in the measurer."
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


def _stage(root: Path, name: str, files: dict[str, Path]) -> Path:
    """A read-only directory holding the stub and one implementation's files, nothing else."""
    staging = root / name
    staging.mkdir()
    shutil.copy(STUB, staging / "stub.py")
    for rel, src in files.items():
        dest = staging / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
    for p in staging.rglob("*"):
        p.chmod(0o555 if p.is_dir() else 0o444)
    staging.chmod(0o755)  # the job file is written next to the stub
    return staging


def _sizes(task: KernelTask, ref: ModuleType) -> tuple[int, int]:
    """(bytes of one input slot, bytes one call may return) over every shape of the task."""
    slot, out = 0, 0
    for shape in [task.timing.shape, *task.shapes]:
        inputs = ref.make_inputs(torch.Generator().manual_seed(0), **shape)
        slot = max(slot, sum(_aligned(x.numel() * x.element_size()) for x in inputs))
        res = ref.reference(*inputs)
        outs = res if isinstance(res, tuple | list) else (res,)
        out = max(out, sum(_aligned(o.numel() * o.element_size()) for o in outs))
    return slot, 2 * out + ALIGN * 8 + 4096


REASONS = {"error:import": "import failed", "error:entry_point": "no entry point",
           "error:call": "candidate raised", "timeout": "timeout", "flood": "output flood",
           "died": "the sandboxed run died", "protocol": "protocol violation"}  # fmt: skip


def verify_kernel(
    task_name: str | KernelTask,
    candidate: Path,
    *,
    device: str = "cpu",
    threads: int = 1,
    timing_overrides: dict[str, int] | None = None,
    timeout_s: float | None = None,
    static_checks: bool = True,
    progress: Callable[[float, str], None] | None = None,
    seed: int | None = None,
) -> KernelResult:
    """Verify ``candidate`` (a .py file or a directory with candidate.py) on a task.

    Raises :class:`~services.verifier.kernel.spec.UnknownTask` or :class:`BadCandidate` for
    input that cannot be verified; any behaviour of the candidate itself is a result.
    ``static_checks=False`` runs the measured run alone (tests prove each finding there);
    ``progress(fraction, message)`` hears of each stage (it may raise to stop the run)."""
    started = time.monotonic()
    task = task_name if isinstance(task_name, KernelTask) else load_task(task_name)
    if timing_overrides:
        task = task.model_copy(update={"timing": task.timing.model_copy(update=timing_overrides)})
    entry, files = candidate_files(candidate)
    hits = static_hits(task, entry, files)
    if hits and static_checks:
        return KernelResult(
            task=task.name, reward=0.0, correct=False, detectors=hits, wall_s=time.monotonic() - started,
            reason="flagged before running: " + ", ".join(sorted({h.detector for h in hits})),
        )  # fmt: skip
    say = progress or (lambda _f, _m: None)
    ref = _load_module(task.directory / "reference.py", f"k3s_ref_{task.name}")
    slot, out_cap = _sizes(task, ref)
    deadline = time.monotonic() + (timeout_s or task.timeout_s)
    base = entry.parent
    common = {"device": device, "threads": threads}
    with tempfile.TemporaryDirectory(prefix="k3s-kernel-") as tmp:
        root = Path(tmp)
        jobs = {
            "reference": ({"ref/reference.py": task.directory / "reference.py"},
                          {"role": "trusted", "module": "/k3s/ref/reference.py", "entry_point": "reference"}),
            "expert": ({"exp/expert.py": task.directory / "expert.py"},
                       {"role": "trusted", "module": "/k3s/exp/expert.py", "entry_point": task.entry_point}),
            "candidate": ({f"candidate/{f.relative_to(base)}": f for f in files},
                          {"role": "candidate", "module": f"/k3s/candidate/{entry.relative_to(base)}",
                           "entry_point": task.entry_point, "forbidden_ops": task.forbidden_ops}),
        }  # fmt: skip
        say(0.02, "starting the reference's, the expert's and the candidate's processes")
        stubs: dict[str, Stub] = {}
        try:
            for name, (stage_files, job) in jobs.items():
                stubs[name] = Stub(_stage(root, name, stage_files), {**job, **common}, name=name,
                                   in_bytes=SLOTS * slot, out_bytes=2 * out_cap, threads=threads)  # fmt: skip
            measurer = Measurer(task, ref.make_inputs, stubs, slot, out_cap, deadline,
                                random.Random(seed if seed is not None else secrets.randbits(64)))  # fmt: skip
            measurer.gpu = device == "cuda"
            return _measure(task, ref, stubs, measurer, deadline, say, started)
        finally:
            for stub in stubs.values():
                stub.close()


def _measure(
    task: KernelTask, ref: ModuleType, stubs: dict[str, Stub], measurer: Measurer,
    deadline: float, say: Callable[[float, str], None], started: float,
) -> KernelResult:  # fmt: skip
    cand = stubs["candidate"]
    judge = OutputJudge(task, ref)
    failure: StubDied | None = None
    try:
        for name in ("reference", "expert"):
            stubs[name].ready(deadline)
        cand.ready(deadline)
        calib = stubs["reference"].ask(
            {"op": "calibrate", "bytes": int(task.roofline_work()[1])}, deadline
        )
        say(0.1, "measuring")
        measurer.run()
        for stub in stubs.values():
            stub.ask({"op": "exit"}, deadline)
    except StubDied as exc:
        failure = exc
    cand.close()
    checked = time.monotonic()
    calls = [c for c in measurer.calls if c.impl == "candidate" and c.metas]
    for i, call in enumerate(calls):
        judge.check(i, call)
    overhead = time.monotonic() - checked
    for detector, evidence in measurer.found.hits:
        judge.flag(detector, evidence)
    _wire_findings(judge, cand.wire, measurer.replaced, clean_exit=failure is None)
    logs = {
        "stdout": cand.stdout[-4000:],
        "stderr": cand.stderr[-4000:],
        "tripwire": cand.wire[:50],
    }
    base = dict(task=task.name, checks=judge.checks, **logs)
    if failure is not None:
        if cand.flooded:
            failure = StubDied(
                "flood", f"the candidate wrote over {cand.output_bytes} bytes to stdout/stderr"
            )
        label = REASONS.get(failure.kind, failure.kind)
        if failure.kind == "timeout":
            label = f"timeout: no result within {task.timeout_s:.0f} s (killed)"
        reason = f"{label}: {str(failure)[-1500:]}"
        if judge.hits:
            reason = (
                "flagged: " + ", ".join(sorted({h.detector for h in judge.hits})) + f" ({reason})"
            )
        return KernelResult(**base, reward=0.0, correct=False, reason=reason, detectors=judge.hits,
                            failed_check="" if judge.hits else failure.kind,
                            wall_s=time.monotonic() - started, verifier_overhead_s=overhead)  # fmt: skip
    t_ref, t_exp, t_cand = (
        measurer.lower_quartile_s(i) for i in ("reference", "expert", "candidate")
    )
    flops, nbytes = task.roofline_work()
    t_roof = max(flops / calib["peak_flops"], nbytes / calib["peak_bytes_per_s"])
    if t_cand < 0.5 * t_roof:
        judge.flag(
            "beyond_roofline",
            f"{t_cand * 1e6:.1f} us per call is under half the roofline {t_roof * 1e6:.1f} us",
        )
    walls = sorted(
        c.wall_ns for c in measurer.calls if c.impl == "candidate" and c.kind == "timing"
    )
    timings = Timings(
        reference_s=t_ref, expert_s=t_exp, candidate_s=t_cand, roofline_s=t_roof,
        speedup_vs_reference=t_ref / t_cand, speedup_vs_expert=t_exp / t_cand,
        peak_flops=calib["peak_flops"], peak_bytes_per_s=calib["peak_bytes_per_s"],
        candidate_wall_s=walls[len(walls) // 4] / 1e9, calls=len(measurer.calls),
        measurer_overhead_s=statistics.median(measurer.found.overhead_ns) / 1e9,
        idle_cpu_s=measurer.found.idle_cpu_ns / 1e9,
    )  # fmt: skip
    failed = [c for c in judge.checks if not c.ok]
    correct = not failed and bool(judge.checks)
    failed_check = ""
    if judge.hits:
        reward, reason = 0.0, "flagged: " + ", ".join(sorted({h.detector for h in judge.hits}))
    elif not correct:
        reward, reason, failed_check = 0.0, *_incorrect(judge.checks)
    else:
        reward = speed_reward(t_ref, t_exp, t_roof, t_cand)
        reason = f"correct on {len(judge.checks)} checks; {t_ref / t_cand:.2f}x the reference, {t_exp / t_cand:.2f}x the expert"
    return KernelResult(**base, reward=reward, correct=correct, reason=reason, detectors=judge.hits,
                        failed_check=failed_check, timings=timings, wall_s=time.monotonic() - started, verifier_overhead_s=overhead)  # fmt: skip


def _incorrect(checks: list[CheckResult]) -> tuple[str, str]:
    """(reason, failed check) of a wrong candidate: the first failed check, where and by how much."""
    failed = [(i, c) for i, c in enumerate(checks, 1) if not c.ok]
    if not failed:
        return "incorrect: no output was checked", "no_output"
    i, first = failed[0]
    return (f"incorrect: {first.detail} on {first.phase} call {i} (check {first.check}; "
            f"{len(failed)} of {len(checks)} checks failed)", first.check)  # fmt: skip


def _wire_findings(
    judge: OutputJudge, wire: list[str], replaced: set[str], *, clean_exit: bool
) -> None:
    """The candidate process's tripwire and its report of replaced functions, as detectors."""
    for line in wire:
        if line.startswith("forbidden "):
            judge.flag(
                "reference_library_call",
                f"called {line.split(' ', 1)[1]} (disabled in the candidate's process)",
            )
        elif line.startswith("decoy "):
            judge.flag("reference_lookup", f"reached for the reference or the expert: {line}")
    if clean_exit and "bye" not in wire:
        judge.flag("harness_tampering", "the tripwire was closed or never answered")
    for name in sorted(replaced):
        leaf = name.rsplit(".", 1)[-1]
        if leaf in CLOCKS:
            judge.flag("timer_tampering", f"{name} was replaced")
        elif leaf in COMPARISONS:
            judge.flag("patched_comparison", f"{name} was replaced")
        else:
            judge.flag("harness_tampering", f"{name} was replaced")
