"""The verifier's job bodies (kernel, submission, world, judge) and their inputs.

Each body receives a :class:`~shared.jobs.JobRun` and returns its result as JSON (stored in
SQL by the job model); artefacts — the candidate's sources, the full result — go to the object
store under ``verifier/jobs/<job id>/``, and the result names their keys.
"""

from __future__ import annotations

import base64
import binascii
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from services.verifier.judges.grm import GRMRequest, judge
from services.verifier.judges.model import JudgeModelError
from services.verifier.judges.world import WorldJudgeRequest, judge_world
from services.verifier.kernel.verify import MAX_CANDIDATE_BYTES, verify_kernel
from services.verifier.models import SubmissionSessionRow
from services.verifier.submission import session as sessions
from services.verifier.uploads import check_names, check_text
from services.verifier.web.spec import MAX_APP_BYTES
from shared.clients import SandboxClient, ToolsClient
from shared.jobs import JobFailed, JobRun
from shared.llm import openai_client
from shared.objectstore import make_object_store
from shared.settings import get_settings


class KernelTiming(BaseModel):
    """Optional overrides of the task's timing (fewer calls for a quick check)."""

    trials: int | None = Field(None, ge=3, le=50)
    iterations: int | None = Field(None, ge=1, le=100)
    warmups: int | None = Field(None, ge=1, le=20)


class KernelJobInput(BaseModel):
    task: str = Field(min_length=1, max_length=100, description="Kernel task name.")
    files: dict[str, str] = Field(
        min_length=1,
        description="The candidate: relative path -> Python source; the entry module is candidate.py (or the only file).",
    )
    timing: KernelTiming | None = None

    @field_validator("files")
    @classmethod
    def _safe_paths(cls, files: dict[str, str]) -> dict[str, str]:
        if len(files) > 50:
            raise ValueError("at most 50 files")
        check_names("files", files, suffix=".py")
        check_text("files", files)
        total = sum(len(src.encode()) for src in files.values())
        if total > MAX_CANDIDATE_BYTES:
            raise ValueError(f"candidate sources are {total} bytes (at most {MAX_CANDIDATE_BYTES})")
        return files

    def write(self, root: Path) -> Path:
        for name, src in self.files.items():
            dest = root / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(src)
        return root if len(self.files) > 1 else root / next(iter(self.files))


class WebJobInput(BaseModel):
    task: str = Field(min_length=1, max_length=100, description="Web task name.")
    files: dict[str, str] = Field(
        min_length=1, description="The app: relative path -> text content."
    )
    binary_files: dict[str, str] = Field(
        default_factory=dict, description="Relative path -> base64 content (images…)."
    )
    judge: bool = Field(
        False,
        description="Add the model-judge term (the endpoint of K3STACK_LLM_URL; weight: the task's weights.judge).",
    )
    judge_model: str | None = Field(
        None, max_length=200, description="Judge model (default: K3STACK_LLM_MODEL)."
    )

    @field_validator("files", "binary_files")
    @classmethod
    def _safe_paths(cls, files: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        check_names(info.field_name or "files", files)
        return files

    @field_validator("files")
    @classmethod
    def _encodable(cls, files: dict[str, str]) -> dict[str, str]:
        check_text("files", files, raw_bytes=True)
        return files

    @field_validator("binary_files")
    @classmethod
    def _base64(cls, files: dict[str, str]) -> dict[str, str]:
        for name, data in files.items():
            try:
                base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"binary_files[{name!r}] is not valid base64") from None
        return files

    @model_validator(mode="after")
    def _size(self) -> WebJobInput:
        both = set(self.files) & set(self.binary_files)
        if both:
            raise ValueError(f"binary_files[{min(both)!r}]: also a name in files")
        check_names("files + binary_files", [*self.files, *self.binary_files])
        total = sum(len(t.encode(errors="surrogatepass")) for t in self.files.values())
        total += sum(len(d) * 3 // 4 for d in self.binary_files.values())
        if total > MAX_APP_BYTES:
            raise ValueError(
                f"files + binary_files: the app is {total} bytes (at most {MAX_APP_BYTES})"
            )
        return self

    def write(self, root: Path) -> Path:
        for name, text in self.files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text, errors="surrogateescape")
        for name, data in self.binary_files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(base64.b64decode(data))
        return root


class SubmissionJobInput(BaseModel):
    session_id: str = Field(min_length=1, max_length=64)
    submission: dict[str, Any] | None = Field(
        None, description="Default: the last submission of the session."
    )


def _store_artefacts(job_id: str, files: dict[str, bytes]) -> list[str]:
    store = make_object_store(get_settings())
    keys = []
    for name, data in files.items():
        key = f"verifier/jobs/{job_id}/{name}"
        store.put(key, data)
        keys.append(key)
    return keys


def kernel_job(job: JobRun) -> dict[str, Any]:
    spec = KernelJobInput.model_validate(job.payload)
    job.progress(0.01, "staging the candidate")
    with tempfile.TemporaryDirectory(prefix="k3s-cand-") as tmp:
        path = spec.write(Path(tmp))
        overrides = spec.timing.model_dump(exclude_none=True) if spec.timing else None
        result = verify_kernel(
            spec.task, path, timing_overrides=overrides or None, progress=job.progress
        )
    job.progress(0.97, "storing artefacts")
    out = result.model_dump(mode="json")
    artefacts = {f"candidate/{n}": s.encode() for n, s in spec.files.items()}
    artefacts["result.json"] = json.dumps(out).encode()
    out["artefacts"] = _store_artefacts(job.id, artefacts)
    out["checks"] = out["checks"][:200]
    return out


def web_job(job: JobRun) -> dict[str, Any]:
    from services.verifier.web.judge import WebJudge
    from services.verifier.web.verify import verify_web

    spec = WebJobInput.model_validate(job.payload)
    settings = get_settings()
    judge = (
        WebJudge(client=openai_client(settings), model=judge_model(spec.judge_model))
        if spec.judge
        else None
    )
    job.progress(0.05, "building and serving the app in a sandbox")
    v = settings.verifier
    with (
        tempfile.TemporaryDirectory(prefix="k3s-web-") as tmp,
        SandboxClient.from_settings(settings) as sandbox,  # timeout, API key, retries
    ):
        result = verify_web(
            spec.task, spec.write(Path(tmp)), sandbox, template=v.web_template, runtime=v.web_runtime,
            judge=judge, create_timeout_s=v.web_create_timeout_s, ttl_s=v.web_sandbox_ttl_s,
            orphan_grace_s=v.web_orphan_grace_s, tag=f"job-{job.id}",
            create_retries=v.web_create_retries,
        )  # fmt: skip
    out = result.model_dump(mode="json")
    shots = {f"screenshots/{name}.png": png for name, png in result.screenshots.items()}
    out["artefacts"] = _store_artefacts(job.id, {**shots, "result.json": json.dumps(out).encode()})
    return out


def submission_job(job: JobRun, database: Any) -> dict[str, Any]:
    """The hidden verifier of a session, once."""
    spec = SubmissionJobInput.model_validate(job.payload)
    with database.session() as s:
        row = s.get(SubmissionSessionRow, spec.session_id)
        if row is None:
            raise JobFailed("not_found", f"submission session {spec.session_id!r} does not exist")
        state = sessions.SessionState.model_validate(row.state)
        try:
            final = sessions.finalize(state, spec.submission)
        except (sessions.SessionClosed, ValueError) as exc:
            raise JobFailed("bad_submission", str(exc)) from None
        row.state = state.model_dump()
    return final.model_dump()


def world_job(job: JobRun) -> dict[str, Any]:
    req = WorldJudgeRequest.model_validate(job.payload)
    settings = get_settings()
    job.progress(0.1, "reading the world's checks")
    llm = openai_client(settings) if settings.verifier.judge_model else None
    req = req.model_copy(update={"model": judge_model(req.model)}) if llm else req
    with ToolsClient.from_settings(settings) as tools, _named_judge_outcome():
        result = judge_world(req, tools, llm)
    return result.model_dump(mode="json")


def judge_job(job: JobRun) -> dict[str, Any]:
    req = GRMRequest.model_validate(job.payload)
    job.progress(0.1, "writing the rubric")
    req = req.model_copy(update={"model": judge_model(req.model)})
    with _named_judge_outcome():
        return judge(openai_client(get_settings()), req).model_dump(mode="json")


@contextmanager
def _named_judge_outcome() -> Iterator[None]:
    """A judge model that failed or never answered as asked (twice) ends the job with the named
    outcome ``judge_no_answer``, not an anonymous error."""
    try:
        yield
    except JudgeModelError as exc:
        raise JobFailed(JudgeModelError.code, str(exc)) from None


def judge_model(asked: str | None = None) -> str:
    """The judge model: the one asked for, else ``K3STACK_VERIFIER__JUDGE_MODEL``.

    Raises:
        NoJudge: none is configured (the routes refuse such requests with a 422 first).
    """
    configured = get_settings().verifier.judge_model
    if not configured:
        raise NoJudge(
            "no judge model is configured: set K3STACK_VERIFIER__JUDGE_MODEL "
            "(and K3STACK_LLM_URL for its endpoint)"
        )
    return asked or configured


class NoJudge(JobFailed):
    def __init__(self, message: str) -> None:
        super().__init__("no_judge", message)
