"""An episode driven by a real CLI: one headless invocation per simulated day, resumed.

The runner leases the world (as for any episode), serves the recording gateway on a loopback
port with a route to the episode's policy endpoint, and hands the CLI the world's apps as MCP
servers (the tools service's ``/worlds/{id}/mcp/{app}``, with the world's token). Day one's
prompt is the task; each later day's is the clock's notice, after the clock moved to the next
due event (as the white-box loop does). Every model exchange the gateway saw becomes an
``exchange`` item and every invocation an ``agent_day`` item; the world is scored as any other.

The CLI runs inside the episode's sandbox (the sandbox service's runtime: ``process`` here,
``microvm`` on KVM hosts; the result and the ATIF export say which, ``runtime``): the agent
cache is shared into it read-only (the sandbox service's ``process_ro_binds``), its network is
an allowlist of two destinations, the gateway and the tools service (whose world token admits
only this world's MCP routes), and its HOME and working folder are the sandbox's. Each day's
generated files (MCP config, Codex's config.toml and catalogue) are written here under a
staging folder and copied in (:func:`~.launch.relocate`); one streamed exec runs the day.
How a day ends is named: the CLI's own end of turn (Claude Code's ``result`` event, Codex's
``turn.completed`` / ``turn.failed``) goes on to the next day, even with exit status 1 (an API
error it reported); otherwise ``agent_timeout`` (past the day's wall budget, killed),
``agent_crashed`` (killed by a signal), ``agent_garbage`` (stdout not its JSON lines) or
``agent_failed`` (exited without ending its turn). A day whose first model request that
offers tools offers none of the world's MCP tools (the CLI came up without its MCP servers: a
dead or slow endpoint) ends ``agent_no_tools``, a failed job, never a "done" that succeeds.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import httpx

from services.orchestrator.episode.driver import DriverContext, NotPausable, Step
from services.orchestrator.episode.loop import World
from services.orchestrator.episode.recorder import EpisodeRecorder
from services.orchestrator.episode.state import EpisodeState, WorldLease
from services.orchestrator.episode.stop import Outcome
from services.orchestrator.gateway import Route, Routes, serving
from services.orchestrator.installed.catalog import AGENTS, ALL, Agent, NotInstalled, require
from services.orchestrator.installed.launch import (
    HOOKS,
    Endpoint,
    Invocation,
    MCPServer,
    invocation,
    probe_env,
    relocate,
)
from services.orchestrator.installed.parsers import PARSERS, parse_output, parse_text
from services.orchestrator.tools.mcp import scenario_apps
from shared.clients import SandboxClient

if TYPE_CHECKING:
    from services.orchestrator.installed.oracle import OracleEngine

__all__ = ["Day", "InstalledDriver", "outcome", "parse_output", "parse_text", "run_in_sandbox"]

GUEST_HOME = "/root/agent"
GUEST_WORK = "/root/work"
ENDS = {a.preset: a.ends for a in ALL}


@dataclass
class Day:
    returncode: int | None
    events: list[dict[str, Any]] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)
    timed_out: bool = False
    wall_s: float = 0.0
    stderr_tail: str = ""


def outcome(preset: str, day: Day) -> Outcome | None:
    """None when the CLI ended its turn itself; else the named way the day went wrong."""
    if day.timed_out:
        return Outcome.agent_timeout
    if day.returncode is not None and day.returncode < 0:
        return Outcome.agent_crashed
    if day.garbage:
        return Outcome.agent_garbage
    if not day.events or day.events[-1].get("type") not in ENDS[preset]:
        return Outcome.agent_failed
    return None


def served_model(base_url: str, api_key: str | None) -> str:
    """The model an OpenAI-compatible endpoint serves (the first of its ``/models``): what an
    installed agent is told to ask for when the episode names none (the model service serves
    its own name, not ``k3``)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=30)
        r.raise_for_status()
        return str(r.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise RuntimeError(
            f"policy.model not given and {base_url}/models names no model ({exc}); "
            "give policy.model"
        ) from None


def run_in_sandbox(
    sandbox: SandboxClient,
    sandbox_id: str,
    inv: Invocation,
    timeout_s: float,
    pidfile: Path | None = None,
) -> Day:
    """Run one invocation as a streamed exec of the sandbox; past ``timeout_s`` the sandbox
    kills its process group. A command killed by signal N exits 128+N there: ``returncode``
    is -N, as a host process's would be. ``pidfile``: the exec's host process group id."""
    from shared.clients import ServiceError

    started = time.monotonic()
    out: list[str] = []
    err: list[str] = []
    rc: int | None = None
    timed_out = False
    try:
        for ev in sandbox.exec_stream(
            sandbox_id, inv.argv, env=inv.env, cwd=str(inv.cwd), timeout_s=timeout_s
        ):
            if ev.kind == "start" and pidfile is not None and ev.pid:
                pidfile.write_text(str(ev.pid))
            elif ev.kind == "stdout":
                out.append(ev.data)
            elif ev.kind in ("stderr", "error"):
                err.append(ev.data)
            elif ev.kind == "exit":
                rc, timed_out = ev.exit_code, ev.timed_out
    except (ServiceError, httpx.HTTPError) as exc:  # the sandbox went away mid-day
        err.append(f"\n[sandbox exec ended: {exc}]")
    finally:
        if pidfile is not None:
            pidfile.unlink(missing_ok=True)
    if rc is not None and rc > 128:
        rc = 128 - rc
    events, garbage = PARSERS[inv.parser]("".join(out), "".join(err))
    tail = "".join(err)[-2000:]
    return Day(rc, events, garbage, timed_out, time.monotonic() - started, tail)


class InstalledDriver:
    """Drives one episode of an installed-agent harness: a tick is one simulated day (one
    invocation of the CLI), committed through the shared :class:`EpisodeRecorder`."""

    name: ClassVar[str] = "installed"

    def __init__(self, ctx: DriverContext) -> None:
        self.svc = ctx.services
        self.id = ctx.job.id
        self.rec = EpisodeRecorder(ctx.db, ctx.services, ctx.job)
        self.request = self.rec.request()
        self.harness = self.rec.harness(self.request)
        self.preset = (
            self.harness.name if self.harness.name in AGENTS else str(self.harness.based_on)
        )
        self.agent: Agent = require(self.preset)
        self.home = Path(self.svc.settings.data_dir) / "agent-runs" / self.id
        self.steps: list[dict[str, Any]] = []
        self.oracle: OracleEngine | None = None
        self._oracle_seen = -1
        self.sandbox_id = ""
        self._probes: dict[str, str] = {}  # each hook's probe, as the binary printed it
        self.model: str | None = None  # the served model's name (set with the route)
        self._open = ExitStack()  # the gateway, served for the run
        self._world: World | None = None
        self._apps: list[str] = []
        self._prompt = ""
        self._endpoint: Endpoint | None = None
        self._mcp: list[MCPServer] = []
        self._deadline = 0.0
        self._reason = Outcome.agent_failed

    # -- policy endpoint -------------------------------------------------------------------------

    def _route(self, world: World) -> Route:
        spec = self.request.policy
        agent = f"{self.agent.package}@{self.agent.version}"
        if spec.kind == "oracle":
            from services.orchestrator.installed.oracle import OracleEngine

            task = self.request.task
            plan = self.svc.tools.get_json(
                f"/scenarios/{task.scenario}/oracle", params={"seed": task.seed}
            )
            self.oracle = OracleEngine(plan, world.now)
            return Route("", None, self.steps.append, agent=agent, answer=self.oracle.respond)
        base = spec.base_url or self.svc.model.openai_base_url
        key = spec.api_key or self.svc.settings.model.api_key
        self.model = spec.model or served_model(base, key)
        return Route(
            base, key, self.steps.append, self.harness.budgets.max_output_tokens, agent=agent
        )  # fmt: skip

    # -- the protocol: a tick is a day -------------------------------------------------------

    def start(self) -> EpisodeState:
        task = self.request.task
        state = self.rec.load_state() or EpisodeState()
        scenario = self.svc.tools.scenario(task.scenario, task.seed).model_dump(mode="json")
        if state.world is None:
            created = self.svc.tools.create_world(task.scenario, task.seed)
            state.world = WorldLease(id=created.id, token=created.token)
            self.rec.lease(world_id=created.id)
        w = state.world
        world = self._world = World(
            self.svc.tools, w.id, w.token,
            end=datetime.fromisoformat(scenario["end"]),
            start=datetime.fromisoformat(scenario["start"]),
        )  # fmt: skip
        state.session_id = state.session_id or str(uuid.uuid4())
        routes = Routes()
        routes.add(self.id, self._route(world))
        self._deadline = time.monotonic() + self.harness.budgets.max_wall_s
        self._prompt = self._task_prompt(scenario, world.now())
        self._apps = scenario_apps(scenario)
        gateway = self._open.enter_context(serving(routes))
        at = self._sandbox(state, gateway)
        self.rec.emit("agent", {"name": self.agent.name, "version": self.agent.version,
                                "package": self.agent.package, "runtime": state.runtime,
                                "sandbox_id": self.sandbox_id})  # fmt: skip
        self.rec.persist(state)
        self._mcp = self._mcp_servers(at["tools"], w, self._apps)
        self._endpoint = Endpoint(
            f"http://{at['gateway']}/episodes/{self.id}", "episode", self._model_name()
        )
        return state

    def tick(self, state: EpisodeState) -> Step:
        """One day: the CLI's invocation, its exchanges recorded, then the clock moved to the
        next due event (or the run's end, named)."""
        assert self._endpoint is not None and self._world is not None, "tick before start"
        left = self._deadline - time.monotonic()
        if left <= 0:
            self._reason = Outcome.max_wall_s
            return Step.done
        day = self._day(self._endpoint, self._prompt, self._mcp, state, left)
        bad = (
            outcome(self.preset, day)
            or self._no_tools(state, self._apps)
            or self._policy_refused(state)
        )
        self._record_day(state, day, bad)
        if bad:
            self._reason = bad
            return Step.done
        notice = self._advance(self._world, state)
        if notice is None:
            self._reason = Outcome.scenario_end
            return Step.done
        self._prompt = notice
        return Step.go_on

    def pause(self, state: EpisodeState) -> None:
        raise NotPausable("an installed agent's episode resumes from its last committed day")

    def finish(self, state: EpisodeState) -> None:
        """The status and the scoring: the outcome's (stop.py)."""
        self._open.close()  # the gateway: the CLI's days are over
        state.exit_reason = self._reason.value
        state.exit_detail = state.exit_detail or self._detail(state)
        self.rec.score_and_finish(state, self._world)

    def close(self) -> None:
        self._open.close()

    def _sandbox(self, state: EpisodeState, gateway: str) -> dict[str, str]:
        """The episode's sandbox, its network the gateway and the tools service only; returns
        where the guest reaches each. A resumed job gets a fresh one (the gateway moved)."""
        box = self.svc.sandbox
        if state.sandbox_id:
            from shared.clients import ServiceError

            try:
                box.kill(state.sandbox_id)
            except ServiceError:
                pass
        dests = {
            "gateway": urlsplit(gateway).netloc,
            "tools": urlsplit(self.svc.tools.base_url).netloc,
        }
        created = box.create(
            self.request.task.sandbox_template or "debian",
            metadata={"k3stack_episode": self.id, "agent": self.agent.name},
            network={"mode": "allowlist", "allow": list(dests.values())},
            timeout=int(self.harness.budgets.max_wall_s) + 600,
        )  # fmt: skip
        self.sandbox_id = created.sandboxID
        state.sandbox_id, state.runtime = created.sandboxID, created.runtime
        self.rec.lease(sandbox_id=created.sandboxID)
        guest = box.get(created.sandboxID).guest_addresses
        box.exec(created.sandboxID, ["mkdir", "-p", f"{GUEST_HOME}/.codex", GUEST_WORK])
        self._require_inside(created.runtime)
        return {name: guest[dest] for name, dest in dests.items()}

    def _require_inside(self, runtime: str) -> None:
        """The CLI (and its pinned Node) must be inside the sandbox, else a named error, never
        the day's exec ending rc 127: the agent cache is shared read-only into the process
        runtime's sandboxes only (K3STACK_SANDBOX__PROCESS_RO_BINDS)."""
        paths = [str(p) for p in (self.agent.binary_path(), *self.agent.path_dirs())]
        out = self.svc.sandbox.exec(
            self.sandbox_id, ["sh", "-c", 'for p; do [ -e "$p" ] || echo "$p"; done', "sh", *paths],
            timeout=60,
        )  # fmt: skip
        missing = out.stdout.split() if out.exit_code == 0 else paths
        if missing:
            raise NotInstalled(
                f"{self.agent.package}@{self.agent.version} is not inside the episode's {runtime} "
                f"sandbox (missing there: {', '.join(missing)}): the agent cache "
                f"{self.agent.prefix().parent} is shared read-only into the process runtime's "
                "sandboxes only (K3STACK_SANDBOX__PROCESS_RO_BINDS); run the sandbox service with "
                "K3STACK_SANDBOX__RUNTIME=process (development only, no isolation boundary)"
            )

    @staticmethod
    def _mcp_servers(tools: str, world: WorldLease, apps: list[str]) -> list[MCPServer]:
        """The world's apps as MCP servers, at ``tools`` (the tools service, as the guest
        reaches it), with the world's token."""
        return [
            MCPServer(app, f"http://{tools}/worlds/{world.id}/mcp/{app}",
                      {"Authorization": f"Bearer {world.token}"})
            for app in apps
        ]  # fmt: skip

    def _model_name(self) -> str:
        """The policy's model: the one named, else the one its endpoint serves (the oracle
        answers any name)."""
        return self.model or self.request.policy.model or "k3"

    def _task_prompt(self, scenario: dict[str, Any], now: datetime) -> str:
        user = scenario["user"]
        text = (
            f"You are the assistant of {user['name']} ({user.get('role') or 'user'}, "
            f"{user['email']}). {scenario['description']}\nIt is {now.isoformat()} on the world "
            "clock. Use the MCP tools of the apps to handle what arrives in the mailbox, chat, "
            "documents and calendar; stop when you are done for now and time will move on."
        )
        return text + (
            f"\n\n{self.request.task.instruction}" if self.request.task.instruction else ""
        )

    def _day(
        self,
        endpoint: Endpoint,
        prompt: str,
        mcp: list[MCPServer],
        state: EpisodeState,
        left: float,
    ) -> Day:
        box = self.svc.sandbox
        staging = self.home / "stage"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        cwd = Path(GUEST_WORK)
        resume = state.day > 1 or state.days_run > 0
        # the episode's own id every day, or the one the CLI reported (spec: session)
        own = self.agent.session is None
        session = state.session_id if own else (state.thread_id if resume else None)
        inv = invocation(
            self.agent, endpoint, staging, cwd, prompt, session, resume=resume, mcp=mcp,
            max_turns=self.harness.budgets.steps_per_day, timeout_s=int(left),
            probes=self._run_probes(),
        )  # fmt: skip
        inv, files = relocate(inv, staging, GUEST_HOME)
        for path, text in files.items():
            box.write_file(self.sandbox_id, path, text)
        return run_in_sandbox(box, self.sandbox_id, inv, left, self.home / "agent.pid")

    def _run_probes(self) -> dict[str, str]:
        """Each hook's probe (Codex's bundled catalogue), run by the binary in the sandbox
        (once an episode)."""
        for name in self.agent.hooks:
            if name in self._probes:
                continue
            out = self.svc.sandbox.exec(
                self.sandbox_id, [str(self.agent.binary_path()), *HOOKS[name].probe],
                timeout=120, env=probe_env(self.agent, name, GUEST_HOME),
            )  # fmt: skip
            if out.exit_code != 0:
                raise RuntimeError(f"{name}: {' '.join(HOOKS[name].probe)}: {out.stderr[-500:]}")
            self._probes[name] = out.stdout
        return self._probes

    def _record_day(self, state: EpisodeState, day: Day, bad: Outcome | None) -> None:
        said = self.agent.session
        kind, key = (said.event, said.field) if said else ("", "")
        for ev in day.events:  # the session a later day resumes (Codex, Kimi Code, Hermes)
            if kind and ev.get("type") == kind and ev.get(key):
                state.thread_id = str(ev[key])
        for step in self.steps:
            self.rec.emit("exchange", step)
        state.step += len(self.steps)
        self.steps.clear()
        state.days_run += 1
        self.rec.emit("agent_day", {
            "day": state.day, "returncode": day.returncode, "outcome": bad.value if bad else "turn_ended",
            "wall_s": round(day.wall_s, 3), "events": len(day.events), "garbage": day.garbage[:5],
            "last_event": day.events[-1] if day.events else None, "stderr_tail": day.stderr_tail,
        })  # fmt: skip
        self.rec.persist(state)

    def _advance(self, world: World, state: EpisodeState) -> str | None:
        """Move the clock to the next due event; the notice for the next day, or None at the
        scenario's end."""
        now = world.now()
        due = [e.due_at for e in world.client.events(world.id).events if e.status == "due"]
        due = sorted(d for d in due if d is not None)
        wake = self.oracle.wake_at() if self.oracle is not None else None
        if wake is not None and wake <= now and self.oracle.next == self._oracle_seen:
            self.oracle.next += 1  # due, yet not called all day: the client never offered it
            wake = self.oracle.wake_at()
        self._oracle_seen = self.oracle.next if self.oracle is not None else 0
        if wake is not None:  # the oracle's next step is due then (like the loop's wake_at)
            due = sorted([*due, max(wake, now)])
        if not due or due[0] > world.end:
            if now < world.end:
                world.client.advance(world.id, to=world.end.isoformat())
            return None
        target = max(due[0], now)
        # the event ids, as the white-box loop records them (the report marks each one's verdict)
        fired = list(world.client.advance(world.id, to=target.isoformat()).fired)
        state.day = (target.date() - world.start.date()).days + 1
        self.rec.emit("clock", {"from": now.isoformat(), "to": target.isoformat(),
                               "day": state.day, "fired": fired})  # fmt: skip
        return (
            f"[World clock: {target.strftime('%A %Y-%m-%d %H:%M')}] {len(fired)} new item(s) "
            "arrived. Check mail, chat and calendar and handle what needs handling."
        )

    def _no_tools(self, state: EpisodeState, apps: list[str]) -> Outcome | None:
        """``agent_no_tools`` when the day's first request with a tool list (side calls carry
        none) offers none of the world's tools. Before the day's exchanges are recorded."""
        from services.orchestrator.installed.oracle import offers_world_tools

        for step in self.steps:
            request = step.get("request")
            offered = offers_world_tools(step.get("api", ""), request, apps) if isinstance(
                request, dict) else None  # fmt: skip
            if offered is None:
                continue
            if offered:
                return None
            names = sorted(_tool_names(request))[:12]
            state.exit_detail = (
                f"day {state.day}: the agent's first model request offered none of the world's "
                f"MCP tools (apps {', '.join(apps)}; it offered {', '.join(names) or 'nothing'})"
            )
            return Outcome.agent_no_tools
        return None

    def _policy_refused(self, state: EpisodeState) -> Outcome | None:
        """``policy_error`` when the day's last model call was refused (a 4xx or 5xx from the
        policy, other than the CLI hanging up): the CLI reports it and ends its turn, yet the
        day did not end normally. Before the day's exchanges are recorded."""
        last = self.steps[-1] if self.steps else None
        if last is None or int(last.get("status") or 0) < 400 or last.get("client_gone"):
            return None
        answer = last.get("response") or last.get("error") or ""
        state.exit_detail = (
            f"day {state.day}: the policy answered {last['status']} to the agent's model call: "
            f"{json.dumps(answer)[:500] if not isinstance(answer, str) else answer[:500]}"
        )
        return Outcome.policy_error

    @staticmethod
    def _detail(state: EpisodeState) -> str:
        return f"the agent CLI ended day {state.day} as {state.exit_reason}"


def _tool_names(request: dict[str, Any]) -> set[str]:
    out = set()
    for t in request.get("tools") or []:
        if isinstance(t, dict):
            name = t.get("name") or (t.get("function") or {}).get("name")
            out.add(str(name))
    return out
