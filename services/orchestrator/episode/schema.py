"""The episode API's request and response models: the wire models in
:mod:`shared.contracts.orchestrator` (clients share them)."""

from shared.contracts.orchestrator import (
    BudgetOverrides,
    Episode,
    EpisodeCreate,
    EpisodeList,
    EventResult,
    PolicySpec,
    TaskSpec,
)

__all__ = [
    "BudgetOverrides",
    "Episode",
    "EpisodeCreate",
    "EpisodeList",
    "EventResult",
    "PolicySpec",
    "TaskSpec",
]
