"""A free-instruction episode with a sandbox (the real sandbox service, process runtime):
Codex's exec_command and apply_patch act on the sandbox's files; the sandbox is released at the end."""

from __future__ import annotations

import json
from pathlib import Path

from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.policy import ScriptedPolicy, Turn
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from shared.clients import SandboxClient, ServiceError

ADD = "*** Begin Patch\n*** Add File: proj/app.py\n+def f():\n+    return 1\n*** End Patch"
UPDATE = "*** Begin Patch\n*** Update File: proj/app.py\n@@ def f():\n-    return 1\n+    return 2\n*** End Patch"
BAD = "*** Begin Patch\n*** Update File: proj/app.py\n@@\n-nothing like this\n+x\n*** End Patch"
MOVE = "*** Begin Patch\n*** Update File: proj/app.py\n*** Move to: proj/main.py\n@@\n def f():\n*** End Patch"

TURNS = [
    ("apply_patch", {"input": ADD}),
    ("apply_patch", {"input": UPDATE}),
    ("apply_patch", {"input": BAD}),
    ("exec_command", {"cmd": f"apply_patch <<'EOF'\n{MOVE}\nEOF\n"}),
    ("exec_command", {"cmd": "cat proj/main.py"}),
    ("exec_command", {"cmd": "echo oops >&2; exit 3"}),
    ("update_plan", {"plan": [{"step": "edit app", "status": "completed"}]}),
]


def script(view) -> Turn:
    if view.step < len(TURNS):
        name, args = TURNS[view.step]
        call = {"id": f"c{view.step}", "name": name, "arguments": json.dumps(args)}
        return Turn(tool_calls=[call])
    return Turn(content="Done.")


def test_codex_edits_files_in_a_sandbox(orch_db, services, sandbox_url, tmp_path: Path) -> None:
    services.sandbox = SandboxClient(sandbox_url, timeout=120.0)
    body = EpisodeCreate.model_validate(
        {"task": {"instruction": "Create proj/app.py.", "sandbox_template": "busybox"},
         "harness": "codex"}
    )  # fmt: skip
    episode_id = create_episode(orch_db, body, lambda _id: None)
    seen: dict[str, str] = {}

    def spy(view) -> Turn:  # read the file while the sandbox is alive
        if view.step == len(TURNS):
            with orch_db.session() as s:
                sid = s.get(EpisodeRow, episode_id).sandbox_id
            seen["main"] = services.sandbox.read_file(sid, "/root/proj/main.py").decode()
        return script(view)

    EpisodeRunner(orch_db, services, episode_id, policy=ScriptedPolicy(spy)).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
    assert row.status == "succeeded", row.error_message
    assert row.state["exit_reason"] == "completed"
    assert seen["main"] == "def f():\n    return 2\n"
    from services.orchestrator.episode.export import trajectory

    obs = [i for i in trajectory(orch_db, episode_id)["items"] if i["kind"] == "tool"]
    text = [o["observation"] for o in obs]
    assert text[0].startswith("Success. Updated the following files:\nA /root/proj/app.py")
    assert text[1].startswith("Success.") and "M /root/proj/app.py" in text[1]
    assert obs[2]["is_error"] and "Failed to find expected lines" in text[2]
    assert "M /root/proj/main.py" in text[3]
    assert text[4].startswith("Exit code: 0\n")
    assert text[4].endswith("Output:\ndef f():\n    return 2\n")
    assert text[5].startswith("Exit code: 3\n") and "oops" in text[5]
    assert text[6] == "Plan updated"
    assert row.state["scratch"]["plan"] == [{"step": "edit app", "status": "completed"}]
    # the sandbox lease was released with the episode
    assert row.resources_released
    try:
        state = services.sandbox.get(row.sandbox_id).state
    except ServiceError as exc:
        assert exc.status == 404
    else:
        assert state in ("killed", "stopped")
