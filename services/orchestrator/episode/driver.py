"""One protocol for every way an episode's state is run to its end.

A driver owns one run of one job (an episode, or a rollout sample): :meth:`~EpisodeDriver.start`
sets it up or resumes it from its last committed tick, :meth:`~EpisodeDriver.tick` does one
committed unit of work (a loop tick, an installed agent's day) and says what comes next,
:meth:`~EpisodeDriver.pause` parks a pausable run at a tick boundary, and
:meth:`~EpisodeDriver.finish` scores it and ends its job. :func:`drive` is the one loop over
them. Drivers are picked by name from a :class:`DriverRegistry`: the core knows only the
protocol, the registry is filled by the composition root (``services/orchestrator/drivers.py``),
so the episode core imports none of its extensions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar, Protocol

from services.orchestrator.episode.state import EpisodeState

if TYPE_CHECKING:
    from services.orchestrator.episode.platform import Services
    from services.orchestrator.episode.protocols import Policy
    from services.orchestrator.harness.config import HarnessConfig
    from shared.db import ServiceDatabase
    from shared.jobs import JobRun


class Step(StrEnum):
    """What a tick says comes next."""

    go_on = "go_on"
    done = "done"  # the run ended (its outcome in the state): finish it
    pause = "pause"  # park it at this boundary; a later run resumes it


@dataclass(frozen=True)
class DriverContext:
    """What every driver is built from: the database, the other services, the claimed run,
    and a policy given in-process (tests, benches) instead of the request's."""

    db: ServiceDatabase
    services: Services
    job: JobRun
    policy: Policy | None = None


class EpisodeDriver(Protocol):
    name: ClassVar[str]

    def start(self) -> EpisodeState:
        """Set the run up, or resume it from its last committed tick."""
        ...

    def tick(self, state: EpisodeState) -> Step:
        """One unit of work, committed before it returns."""
        ...

    def pause(self, state: EpisodeState) -> None:
        """Park the run at this tick boundary (only after a tick said :attr:`Step.pause`)."""
        ...

    def finish(self, state: EpisodeState) -> None:
        """Score the run (when its outcome is scored) and end its job."""
        ...

    def close(self) -> None:
        """Release what the run holds open (sessions, servers); the run's end either way."""
        ...


DriverFactory = Callable[[DriverContext], EpisodeDriver]


class NotPausable(RuntimeError):
    """A driver with no pausable phase was asked to pause (its runs resume from their last
    committed tick instead)."""


class UnknownDriver(LookupError):
    """A stored driver name that no registered driver answers to."""


class DriverRegistry:
    """Driver names to their factories, and the harness kinds each one drives."""

    def __init__(self) -> None:
        self._factories: dict[str, DriverFactory] = {}
        self._by_kind: dict[str, str] = {}

    def register(
        self, name: str, factory: DriverFactory, harness_kinds: Iterable[str] = ()
    ) -> DriverRegistry:
        if name in self._factories:
            raise ValueError(f"driver {name!r} is registered already")
        self._factories[name] = factory
        for kind in harness_kinds:
            self._by_kind[kind] = name
        return self

    def names(self) -> list[str]:
        return sorted(self._factories)

    def get(self, name: str) -> DriverFactory:
        try:
            return self._factories[name]
        except KeyError:
            raise UnknownDriver(
                f"no episode driver {name!r} (known: {', '.join(self.names())})"
            ) from None

    def for_harness(self, harness: HarnessConfig) -> str:
        """The driver that runs an episode of this harness (picked once, at submit)."""
        try:
            return self._by_kind[harness.kind]
        except KeyError:
            raise UnknownDriver(
                f"no episode driver for harness kind {harness.kind!r} "
                f"(known kinds: {', '.join(sorted(self._by_kind))})"
            ) from None


def drive(driver: EpisodeDriver) -> Step:
    """Start the run, tick it until it is done or pauses, then finish or pause it; the driver
    is closed whatever happens. Returns how the run left off."""
    try:
        state = driver.start()
        step = driver.tick(state)
        while step is Step.go_on:
            step = driver.tick(state)
        if step is Step.pause:
            driver.pause(state)
        else:
            driver.finish(state)
        return step
    finally:
        driver.close()
