"""The task format, its schema, the reward formula, the source checks and the measurer's output
judge, without a sandbox."""

from __future__ import annotations

import json
import math
import random

import jsonschema
import pytest
import torch
import yaml
from pydantic import ValidationError

from services.verifier.kernel.checks import OutputJudge
from services.verifier.kernel.measure import PROBES, Call, _change_one, schedule
from services.verifier.kernel.reward import speed_reward
from services.verifier.kernel.spec import (
    SCHEMA_PATH,
    TASKS_DIR,
    KernelTask,
    evaluate,
    json_schema,
    load_task,
    task_names,
)
from services.verifier.kernel.static_check import check_source


def test_ships_the_required_tasks() -> None:
    names = set(task_names())
    assert {
        "softmax",
        "layernorm",
        "matmul_bias_gelu",
        "logsumexp",
        "causal_attention",
        "kda_step",
        "mxfp4_matmul",
    } <= names
    for name in names:
        task = load_task(name)
        assert (task.directory / "reference.py").is_file() and (
            task.directory / "expert.py"
        ).is_file()
        assert task.correctness_trials >= 5
        flops, nbytes = task.roofline_work()
        assert flops > 0 and nbytes > 0


def test_schema_file_is_current_and_validates_every_task() -> None:
    assert json.loads(SCHEMA_PATH.read_text()) == json_schema(), (
        "run python -m services.verifier.kernel.spec"
    )
    for path in TASKS_DIR.glob("*/task.yaml"):
        jsonschema.validate(yaml.safe_load(path.read_text()), json_schema())


def test_task_format_rejects_bad_fields() -> None:
    base = yaml.safe_load((TASKS_DIR / "softmax" / "task.yaml").read_text())
    with pytest.raises(ValidationError, match="correctness_trials"):
        KernelTask.model_validate({**base, "correctness_trials": 2})
    with pytest.raises(ValidationError, match="positive"):
        KernelTask.model_validate({**base, "shapes": [{"rows": 0, "cols": 3}]})
    with pytest.raises(ValidationError, match="extra"):
        KernelTask.model_validate({**base, "surprise": 1})
    with pytest.raises(ValueError, match="only numbers"):
        evaluate("__import__('os')", {"rows": 1})


def test_reward_points_and_monotonicity() -> None:
    ref, exp, roof = 8.0, 1.0, 0.1
    assert speed_reward(ref, exp, roof, 8.0) == pytest.approx(0.1)  # the floor for being right
    assert speed_reward(ref, exp, roof, 16.0) == pytest.approx(0.05)
    assert speed_reward(ref, exp, roof, 1e6) > 0
    assert speed_reward(ref, exp, roof, 1.0) == pytest.approx(0.55)
    assert speed_reward(ref, exp, roof, 0.1) == pytest.approx(1.0)
    times = [1e4, 20, 8, 6, 4, 2, 1, 0.5, 0.3, 0.1, 0.05]
    rewards = [speed_reward(ref, exp, roof, t) for t in times]
    assert rewards == sorted(rewards) and len(set(rewards)) == len(rewards) - 1
    # an expert no faster than the reference still leaves the points ordered
    assert 0 < speed_reward(1.0, 1.0, 0.01, 0.5) <= 1


@pytest.mark.parametrize(
    ("source", "detector"),
    [
        ("import threading\n", "side_stream_or_thread"),
        ("import torch\ns = torch.cuda.Stream()\n", "side_stream_or_thread"),
        ("import torch\ng = torch.cuda.CUDAGraph()\n", "cuda_graph_replay"),
        ("import time\ntime.perf_counter = lambda: 0\n", "timer_tampering"),
        ("import sys\nh = sys.modules['__main__']\n", "timer_tampering"),
        ("import gc\n", "timer_tampering"),
        (
            "def f(x):\n    try:\n        return x\n    except Exception:\n        return x\n",
            "try_except_fallback",
        ),
        ("import torch\ny = torch.softmax(x, -1)\n", "reference_library_call"),
        ("import torch\ny = getattr(torch, 'softmax')\n", "reference_library_call"),
        ("import torch\ny = x.half()\n", "lowered_precision"),
        ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n", "lowered_precision"),
        ("import torch\ny = torch.Tensor._make_subclass(T, x)\n", "lazy_output"),
        ("def f(:\n", "syntax_error"),
    ],
)
def test_static_checks(source: str, detector: str) -> None:
    hits = check_source(source, "c.py", ["softmax"])
    assert detector in {h.detector for h in hits}, hits


def test_static_checks_pass_every_expert() -> None:
    for name in task_names():
        task = load_task(name)
        src = (task.directory / "expert.py").read_text()
        assert check_source(src, "expert.py", task.forbidden_calls) == [], name


def _meta(t: torch.Tensor) -> dict:
    t = t.contiguous()
    return {"tensor": True, "exact": True, "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape), "stride": list(t.stride()),
            "raw": t.reshape(-1).view(torch.uint8).numpy().tobytes()}  # fmt: skip


def _call(kind: str, inputs: tuple, outputs: list) -> Call:
    return Call("candidate", kind, {}, inputs=inputs, metas=[_meta(o) for o in outputs])


@pytest.mark.parametrize("timing", [{"trials": 3, "iterations": 1, "warmups": 1}, {}])
def test_every_probe_follows_a_candidate_call_of_its_shape(timing: dict[str, int]) -> None:
    """A probe with nothing to build on was turned into a plain trial: 1.4% of schedules lost
    their pointer or near probe at three timed trials (0.3% at the task's own timing)."""
    task = load_task("logsumexp")
    task = task.model_copy(update={"timing": task.timing.model_copy(update=timing)})
    for seed in range(500):
        calls = schedule(task, random.Random(seed))
        probes = [i for i, c in enumerate(calls) if c.kind in PROBES]
        assert sorted(calls[i].kind for i in probes) == sorted(
            ["pointer", "near", "one", "one", "one", "repeat", "repeat", "repeat"]
        )
        for i in probes:
            earlier = [c for c in calls[:i] if c.impl == "candidate" and c.shape == calls[i].shape]
            if calls[i].kind == "repeat":
                earlier = [c for c in earlier if c.kind == "timing"]
            assert earlier, (seed, i, calls[i].kind)


def test_a_one_element_probe_changes_one_value_to_an_extreme_of_its_input() -> None:
    x = torch.randn(8, 16)
    (y,) = _change_one((x,), random.Random(3))
    assert int((y != x).sum()) == 1
    assert float(y.min()) >= float(x.min()) and float(y.max()) <= float(x.max())


def test_a_stale_answer_to_a_one_element_probe_is_wrong_and_names_output_caching() -> None:
    """By correctness, not time: the cached output is another input's answer."""
    task = load_task("softmax")
    judge = OutputJudge(task, _module(task, "reference"))
    x = torch.randn(4, 32)
    (y,) = _change_one((x,), random.Random(0))
    assert judge.check(0, _call("trial", (x,), [judge.expected((x,))[0][0]]))
    assert not judge.check(1, _call("one", (y,), [judge.expected((x,))[0][0]]))
    assert [h.detector for h in judge.hits] == ["output_caching"], judge.hits


def test_an_honest_output_a_one_element_probe_leaves_unchanged_is_not_a_cache() -> None:
    """kda_step's query reaches ``out`` but not ``new_state``: that output repeats, rightly."""
    task = load_task("kda_step")
    ref = _module(task, "reference")
    judge = OutputJudge(task, ref)
    base = ref.make_inputs(torch.Generator().manual_seed(0), **task.shapes[0])
    q = base[0].clone()
    q.reshape(-1)[0] = q.max()
    probe = (q, *base[1:])
    assert judge.check(0, _call("trial", base, judge.expected(base)[0]))
    assert judge.check(1, _call("one", probe, judge.expected(probe)[0]))
    assert judge.hits == []


def _module(task: KernelTask, name: str):  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"k3s_test_{name}", task.directory / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "times", [(2.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 0.0), (2.0, 1.0, 0.5, 0.0)]
)
def test_speed_reward_of_times_measured_as_zero_is_a_number_in_range(times) -> None:  # type: ignore[no-untyped-def]
    """A charged time of 0 (an expert's lower quartile under load hit it in a stressed run, and
    the job failed with ZeroDivisionError) gives a reward in [0, 1], never a crash."""
    r = speed_reward(*times)
    assert 0.0 <= r <= 1.0 and math.isfinite(r)
