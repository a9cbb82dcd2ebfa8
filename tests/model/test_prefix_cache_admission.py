"""Budget-based admission per prompt-length class (report §5.4.3), by scheduling order."""

from __future__ import annotations

import pytest

from services.model.arch import K3Config, K3ForCausalLM
from services.model.serving.offline import OfflineEngine
from services.model.serving.pool import PagedPool
from services.model.serving.runner import K3Runner
from services.model.serving.scheduler import AdmissionClass, parse_admission_classes


@pytest.fixture(scope="module")
def model() -> K3ForCausalLM:
    return K3ForCausalLM(K3Config.preset("tiny")).init_weights(0).eval()


def admit_steps(model, classes) -> dict[str, int]:
    pool = PagedPool.for_tokens(model.config, max_tokens=4096, max_requests=8, page_tokens=64)
    eng = OfflineEngine(
        K3Runner(model, pool), max_num_seqs=8, max_num_batched_tokens=96,
        admission_classes=classes,
    )  # fmt: skip
    reqs = [eng.submit(f"long{i}", list(range(10, 410)), 1) for i in range(4)]
    reqs += [eng.submit(f"short{i}", list(range(20, 40)), 1) for i in range(2)]
    while any(eng._results[id(r)].admit_step is None for r in reqs[4:]):
        eng.step()
        assert eng.steps < 40
    return {r.request_id: eng._results[id(r)].admit_step for r in reqs}, eng


def test_a_burst_of_long_prompts_does_not_hold_back_short_ones(model):
    fifo, _ = admit_steps(model, ())
    assert fifo["short0"] > 4  # first come first served: behind 1,600 long prompt tokens
    classed, eng = admit_steps(model, [AdmissionClass(64, 40), AdmissionClass(None, 56)])
    assert classed["short0"] == classed["short1"] == 1  # within their own class budget
    assert classed["long0"] == 1 and classed["long1"] != 1  # longs share their class budget
    assert eng.scheduler.class_admitted[0] == 2
    assert eng.scheduler.class_wait_steps[1] > 0


def test_admission_classes_parse_from_the_setting():
    assert parse_admission_classes("2048:128,*:256", 512) == [
        AdmissionClass(2048, 128), AdmissionClass(None, 256)
    ]  # fmt: skip
    assert parse_admission_classes("100:8", 64)[-1] == AdmissionClass(None, 64)
    assert parse_admission_classes("", 64) == []
    with pytest.raises(ValueError, match="'x:1'"):
        parse_admission_classes("x:1", 64)
