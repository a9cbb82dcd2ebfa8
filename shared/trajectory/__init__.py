"""Versioned trajectory schema and its exporters; see :mod:`shared.trajectory.schema`."""

from shared.trajectory.schema import (
    FORMAT_VERSION,
    CompactionStep,
    EventResult,
    Exit,
    Generation,
    MessageStep,
    Metadata,
    ModelStep,
    Observation,
    PausePoint,
    PauseStep,
    Request,
    Step,
    Trajectory,
    TrajectoryFormatError,
    chat_request_body,
)

__all__ = [
    "FORMAT_VERSION",
    "CompactionStep",
    "EventResult",
    "Exit",
    "Generation",
    "MessageStep",
    "Metadata",
    "ModelStep",
    "Observation",
    "PausePoint",
    "PauseStep",
    "Request",
    "Step",
    "Trajectory",
    "TrajectoryFormatError",
    "chat_request_body",
]
