"""The trajectory: what happened in one episode, step by step, in a versioned JSON format.

A :class:`Trajectory` is a list of steps, each one of four kinds:

- :class:`MessageStep` — a message the model did not write entering its context (the system
  prompt, the user's task, a notification the harness injects);
- :class:`ModelStep` — one model call: the assistant message it produced (text, reasoning,
  tool calls), what is known at token level (:class:`Generation`: token ids, logprobs, loss
  mask, usage, weight version), the request options it ran with, and the observations — the
  results of its tool calls, which enter the context as ``tool`` messages;
- :class:`CompactionStep` — a boundary: the harness replaced the context (summary, masking,
  truncation) and the next segment starts from ``context``;
- :class:`PauseStep` — a pause point: the sandbox checkpoint and the world snapshot taken
  together, from which the episode can resume or fork.

The context of every model call follows from the steps before it (messages appended, replaced at
each compaction), so :meth:`Trajectory.requests` rebuilds the exact request each call sent; that
is what the replay exporter records and what an RL trainer re-tokenises (or reads token ids).

Building one as an episode runs::

    from shared.chat import ChatMessage, ToolCall, FunctionCall, Usage
    from shared.trajectory import Trajectory, Generation

    traj = Trajectory(id="ep-1", tools=tools)
    traj.metadata.harness, traj.metadata.model, traj.metadata.task = "codex", "k3-tiny", "t-7"
    traj.add_message(ChatMessage(role="system", content="You are a coding agent."))
    traj.add_message(ChatMessage(role="user", content="Fix the failing test."))
    body = traj.next_request_body({"temperature": 0.0, "seed": 7})  # what to send the model
    call = ToolCall(id="c1", function=FunctionCall(name="shell", arguments='{"cmd": "pytest"}'))
    traj.add_model_step(
        ChatMessage(role="assistant", content=None, tool_calls=[call]),
        Generation(usage=Usage(prompt_tokens=40, completion_tokens=9, total_tokens=49),
                   finish_reason="tool_calls"),
        options={"temperature": 0.0, "seed": 7},
    )
    traj.add_observation("c1", "1 failed, 3 passed")
    traj.add_pause(sandbox_checkpoint_id="cp-3", world_snapshot_id="snap-2")
    traj.add_compaction([ChatMessage(role="user", content="Summary: ...")], summary="...")
    traj.finish("completed", reward=1.0)
    text = traj.to_json()                      # store it
    same = Trajectory.from_json(text)          # read it back (checks the format version)

Exporters: :func:`shared.trajectory.replay.to_replay_lines` (the model service's ``replay``
engine) and :func:`shared.trajectory.atif.to_atif` (Harbor's ATIF; :func:`~shared.trajectory.atif.from_atif`
reads it back, and reads other agents' ATIF too).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.chat import ChatMessage, ContentPart, ToolDefinition, Usage
from shared.ids import ResourceId

FORMAT = "k3stack.trajectory"
FORMAT_VERSION = "1.0"  # major.minor: a reader accepts its own major, any minor


class TrajectoryFormatError(ValueError):
    """Not a trajectory this code can read (wrong format name or major version)."""


def _now() -> datetime:
    return datetime.now(UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --------------------------------------------------------------------------- pieces


class Observation(_Model):
    """The result of one tool call, as it entered the context (a ``tool`` message)."""

    tool_call_id: str
    content: str | list[ContentPart]
    is_error: bool = Field(False, description="The tool failed (bad arguments, exception...).")
    duration_ms: float | None = None
    timestamp: datetime = Field(default_factory=_now, description="When the result came back.")
    metadata: dict[str, Any] = Field(default_factory=dict)

    def as_message(self) -> ChatMessage:
        return ChatMessage(role="tool", tool_call_id=self.tool_call_id, content=self.content)


class Generation(_Model):
    """What is known about one model call below the message: usage, tokens, logprobs.

    Token-level fields are optional (an upstream API may not return them). ``loss_mask``,
    ``logprobs`` and ``completion_token_ids`` align one-to-one when present; ``loss_mask`` is 1
    where a trainer should learn from the token.
    """

    model: str | None = Field(None, description="Model id that answered.")
    usage: Usage | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = Field(
        None, description="Log-probability of each completion token."
    )
    loss_mask: list[Literal[0, 1]] | None = None
    weight_version: str | None = Field(
        None, description="Policy weights that produced it (partial rollout spans versions)."
    )
    response_id: str | None = Field(None, description="The completion's id (chatcmpl-...).")
    latency_ms: float | None = None

    @model_validator(mode="after")
    def _aligned(self) -> Generation:
        lengths = {
            name: len(v)
            for name in ("completion_token_ids", "logprobs", "loss_mask")
            if (v := getattr(self, name)) is not None
        }
        if len(set(lengths.values())) > 1:
            raise ValueError(f"token-level fields must align one-to-one; lengths {lengths}")
        return self


class PausePoint(_Model):
    """Where an episode can be resumed or forked: both halves of its environment, together."""

    sandbox_checkpoint_id: str | None = None
    world_snapshot_id: str | None = None


class EventResult(_Model):
    """One world event's verdict (the tools service's checks)."""

    event_id: str
    passed: bool
    detail: str | None = None


ExitStatus = Literal[
    "completed",  # the agent said it was done
    "max_steps",
    "max_tokens",  # the context could not be made to fit
    "timeout",
    "cancelled",
    "error",
    "paused",  # stopped at a pause point, to be resumed
]


class Exit(_Model):
    status: ExitStatus
    reason: str | None = None
    at: datetime = Field(default_factory=_now)


class Metadata(_Model):
    harness: str | None = Field(None, description="Harness preset (claude_code, codex, ...).")
    harness_version: str | None = None
    model: str | None = None
    task: str | None = None
    seed: int | None = None
    reward: float | None = None
    event_results: list[EventResult] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)


# --------------------------------------------------------------------------- steps


class _Step(_Model):
    timestamp: datetime = Field(default_factory=_now)


class MessageStep(_Step):
    kind: Literal["message"] = "message"
    message: ChatMessage


class ModelStep(_Step):
    kind: Literal["model"] = "model"
    message: ChatMessage
    generation: Generation = Field(default_factory=Generation)
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Request fields besides messages and tools (temperature, seed, max_tokens, "
        "tool_choice, reasoning_effort...), as sent.",
    )
    observations: list[Observation] = Field(default_factory=list)

    @field_validator("message")
    @classmethod
    def _assistant(cls, v: ChatMessage) -> ChatMessage:
        if v.role != "assistant":
            raise ValueError(f"a model step's message is the assistant's, not {v.role!r}")
        return v

    @model_validator(mode="after")
    def _observations_answer_calls(self) -> ModelStep:
        ids = [c.id for c in self.message.tool_calls or []]
        for obs in self.observations:
            if obs.tool_call_id not in ids:
                raise ValueError(f"observation for {obs.tool_call_id!r}: no such call in {ids}")
        return self


class CompactionStep(_Step):
    kind: Literal["compaction"] = "compaction"
    context: list[ChatMessage] = Field(
        description="The whole context the next segment starts from (replaces the old one)."
    )
    strategy: str = Field("summary", description="summary, masking, truncation ...")
    summary: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    generation: Generation | None = Field(None, description="The summarising model call, if any.")


class PauseStep(_Step):
    kind: Literal["pause"] = "pause"
    point: PausePoint
    reason: str | None = None


Step = Annotated[MessageStep | ModelStep | CompactionStep | PauseStep, Field(discriminator="kind")]


def chat_request_body(
    messages: Iterable[ChatMessage],
    tools: Iterable[ToolDefinition] = (),
    options: dict[str, Any] | None = None,
    *,
    model: str | None = None,
) -> dict[str, Any]:
    """An OpenAI chat-completions body: the one way a context becomes a request (``tools`` only
    when there are some), so recorded and replayed requests match byte for byte."""
    body: dict[str, Any] = {
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in messages]
    }
    offered = [t.model_dump(mode="json", exclude_none=True) for t in tools]
    if offered:
        body["tools"] = offered
    body.update(options or {})
    if model is not None:
        body["model"] = model
    return body


class Request(BaseModel):
    """One model call rebuilt from a trajectory: what was sent and what came back."""

    step_index: int
    segment: int
    messages: list[ChatMessage]
    tools: list[ToolDefinition]
    options: dict[str, Any]
    step: ModelStep

    def body(self, model: str | None = None) -> dict[str, Any]:
        return chat_request_body(self.messages, self.tools, self.options, model=model)


# --------------------------------------------------------------------------- trajectory


class Trajectory(_Model):
    format: Literal["k3stack.trajectory"] = FORMAT
    format_version: str = FORMAT_VERSION
    id: ResourceId
    created_at: datetime = Field(default_factory=_now)
    metadata: Metadata = Field(default_factory=Metadata)
    tools: list[ToolDefinition] = Field(default_factory=list, description="Offered to the model.")
    steps: list[Step] = Field(default_factory=list)
    exit: Exit | None = Field(None, description="How it ended; null while running.")

    @field_validator("format_version")
    @classmethod
    def _known_major(cls, v: str) -> str:
        major = v.split(".", 1)[0]
        if major != FORMAT_VERSION.split(".", 1)[0]:
            raise ValueError(
                f"trajectory format version {v!r}: this code reads {FORMAT_VERSION.split('.')[0]}.x"
            )
        return v

    # -- reading and writing

    def to_json(self, **kw: Any) -> str:
        return self.model_dump_json(**kw)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trajectory:
        try:
            return cls.model_validate_json(text)
        except ValueError as exc:
            raise TrajectoryFormatError(f"not a readable trajectory: {exc}") from exc

    # -- building

    def add_message(self, message: ChatMessage, **kw: Any) -> MessageStep:
        step = MessageStep(message=message, **kw)
        self.steps.append(step)
        return step

    def add_model_step(
        self,
        message: ChatMessage,
        generation: Generation | None = None,
        *,
        options: dict[str, Any] | None = None,
        **kw: Any,
    ) -> ModelStep:
        step = ModelStep(
            message=message, generation=generation or Generation(), options=options or {}, **kw
        )
        self.steps.append(step)
        return step

    def add_observation(
        self, tool_call_id: str, content: str | list[ContentPart], **kw: Any
    ) -> Observation:
        """Record a tool call's result on the model step that made the call."""
        for step in reversed(self.steps):
            if isinstance(step, ModelStep) and any(
                c.id == tool_call_id for c in step.message.tool_calls or []
            ):
                if any(o.tool_call_id == tool_call_id for o in step.observations):
                    raise ValueError(f"tool call {tool_call_id!r} already has its observation")
                obs = Observation(tool_call_id=tool_call_id, content=content, **kw)
                step.observations.append(obs)
                return obs
            if isinstance(step, CompactionStep):
                break
        raise ValueError(f"no tool call {tool_call_id!r} in the current segment")

    def add_compaction(self, context: list[ChatMessage], **kw: Any) -> CompactionStep:
        step = CompactionStep(context=context, **kw)
        self.steps.append(step)
        return step

    def add_pause(
        self,
        *,
        sandbox_checkpoint_id: str | None = None,
        world_snapshot_id: str | None = None,
        reason: str | None = None,
        **kw: Any,
    ) -> PauseStep:
        point = PausePoint(
            sandbox_checkpoint_id=sandbox_checkpoint_id, world_snapshot_id=world_snapshot_id
        )
        step = PauseStep(point=point, reason=reason, **kw)
        self.steps.append(step)
        return step

    def finish(
        self, status: ExitStatus, *, reason: str | None = None, reward: float | None = None
    ) -> Exit:
        self.exit = Exit(status=status, reason=reason)
        if reward is not None:
            self.metadata.reward = reward
        return self.exit

    # -- deriving

    def _walk(self) -> Iterator[tuple[int, int, list[ChatMessage], Step]]:
        """(index, segment, context before the step, step) for every step."""
        context: list[ChatMessage] = []
        segment = 0
        for index, step in enumerate(self.steps):
            yield index, segment, list(context), step
            if isinstance(step, MessageStep):
                context.append(step.message)
            elif isinstance(step, ModelStep):
                context.append(step.message)
                context.extend(o.as_message() for o in step.observations)
            elif isinstance(step, CompactionStep):
                context = list(step.context)
                segment += 1
        yield len(self.steps), segment, context, None  # type: ignore[misc]

    def requests(self) -> Iterator[Request]:
        """Every model call with the exact messages it was sent."""
        for index, segment, context, step in self._walk():
            if isinstance(step, ModelStep):
                yield Request(
                    step_index=index,
                    segment=segment,
                    messages=context,
                    tools=self.tools,
                    options=step.options,
                    step=step,
                )

    def context(self) -> list[ChatMessage]:
        """The messages the next model call must send."""
        *_, (_, _, context, _) = self._walk()
        return context

    def next_request_body(
        self, options: dict[str, Any] | None = None, *, model: str | None = None
    ) -> dict[str, Any]:
        """The chat request the next model call sends: the current context and the tools."""
        return chat_request_body(self.context(), self.tools, options, model=model)

    def pause_points(self) -> list[tuple[int, PausePoint]]:
        return [(i, s.point) for i, s in enumerate(self.steps) if isinstance(s, PauseStep)]

    def usage(self) -> Usage:
        """Token totals over every model call (compaction calls included)."""
        prompt = completion = cached = 0
        for step in self.steps:
            gen = step.generation if isinstance(step, ModelStep | CompactionStep) else None
            if gen is not None and gen.usage is not None:
                prompt += gen.usage.prompt_tokens
                completion += gen.usage.completion_tokens
                cached += gen.usage.cached_tokens
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details={"cached_tokens": cached},
        )
