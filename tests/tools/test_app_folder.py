"""Adding an app touches only its folder: a minimal app (``echo``: one table, one REST route,
two MCP tools, one effect, one check, a state export, declared in its ``app.py``) written into a temporary folder on the
apps package's path is mounted, served over MCP, scripted by scenarios, exported, forked and
judged by the core without any core file naming it. Its table comes from its own Alembic
revision in its own ``migrations/`` folder, which the service's startup finds and runs.

It runs in a subprocess, so the extra app never joins this test session's metadata.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

FILES = {
    "__init__.py": '"""A minimal app for the folder-discovery test."""\n',
    "models.py": """
        from sqlalchemy import String, Text
        from sqlalchemy.orm import Mapped, mapped_column

        from services.tools.db import Base, WorldScoped


        class EchoNote(WorldScoped, Base):
            __tablename__ = "echo_notes"
            id: Mapped[str] = mapped_column(String(64), primary_key=True)
            text: Mapped[str] = mapped_column(Text)
    """,
    "actions.py": """
        from sqlalchemy import select

        from services.tools.apps.echo.models import EchoNote


        def add_note(ctx, text):
            row = EchoNote(world_id=ctx.world_id, id=ctx.new_id(), text=text)
            ctx.session.add(row)
            ctx.session.flush()
            ctx.record("echo", "notes.add", {"id": row.id, "text": text})
            return {"id": row.id, "text": text}


        def notes(ctx):
            rows = ctx.session.scalars(
                select(EchoNote).where(EchoNote.world_id == ctx.world_id).order_by(EchoNote.id)
            )
            return [{"id": r.id, "text": r.text} for r in rows]
    """,
    "routes.py": """
        from fastapi import APIRouter
        from pydantic import BaseModel

        from services.tools.apps.echo import actions
        from services.tools.context import WorldCtx, WorldRoute

        router = APIRouter(prefix="/worlds/{world_id}/echo", tags=["echo"], route_class=WorldRoute)


        class NoteIn(BaseModel):
            text: str


        @router.post("/notes", operation_id="echo_addNote")
        def add(ctx: WorldCtx, body: NoteIn) -> dict:
            return actions.add_note(ctx, body.text)


        @router.get("/notes", operation_id="echo_listNotes")
        def list_notes(ctx: WorldCtx) -> dict:
            return {"notes": actions.notes(ctx)}
    """,
    "tools.py": """
        from pydantic import BaseModel

        from services.tools.apps.echo import actions
        from services.tools.mcp.registry import forward, tool


        class Note(BaseModel):
            \"\"\"Add a note.\"\"\"

            text: str


        class Nothing(BaseModel):
            pass


        forward("echo", "echo_add_note", Note, actions.add_note)


        @tool("echo", "echo_list_notes", Nothing, read_only=True)
        def list_notes(ctx, a):
            \"\"\"List the notes.\"\"\"
            return {"notes": actions.notes(ctx)}
    """,
    "ops.py": """
        from services.tools.apps.echo import actions
        from services.tools.events.registry import Outcome, effect, predicate


        @effect("echo.note")
        def note(ctx, args, env):
            actions.add_note(ctx, args["text"])


        @predicate("echo.has_note")
        def has_note(ctx, args):
            texts = [n["text"] for n in actions.notes(ctx)]
            return Outcome(args["text"] in texts, {"texts": texts})
    """,
    "migrations/echo_0001.py": """
        \"\"\"echo: notes

        Revision ID: echo0001
        Revises: t0001
        \"\"\"

        import sqlalchemy as sa
        from alembic import op

        revision = "echo0001"
        down_revision = "t0001"
        branch_labels = ("echo",)
        depends_on = None


        def upgrade():
            op.create_table(
                "echo_notes",
                sa.Column("world_id", sa.String(length=64), nullable=False),
                sa.Column("id", sa.String(length=64), nullable=False),
                sa.Column("text", sa.Text(), nullable=False),
                sa.PrimaryKeyConstraint("world_id", "id"),
            )


        def downgrade():
            op.drop_table("echo_notes")
    """,
    "state.py": """
        from services.tools.apps.echo import actions


        def export_state(ctx):
            return {"notes": actions.notes(ctx)}
    """,
    "app.py": """
        from services.tools.apps.base import ToolsApp
        from services.tools.apps.echo import routes, state

        APP = ToolsApp(name="echo", routers=[routes.router], export_state=state.export_state)
    """,
}

SCRIPT = """
import sys, tempfile, os
os.environ["K3STACK_DATA_DIR"] = tempfile.mkdtemp()
os.environ["K3STACK_AUTH_ENABLED"] = "false"
import services.tools.apps as pkg
pkg.__path__.append(sys.argv[1])

from fastapi.testclient import TestClient
from sqlalchemy import inspect

from services.tools.app import create_app
from services.tools.events.registry import get_effect, get_predicate
from services.tools.context import open_world
from services.tools.events.engine import evaluate_check
from shared.contracts.tools import Check

with TestClient(create_app()) as c:
    from shared.auth import service_key
    c.headers["X-API-Key"] = service_key(c.app.state.settings, "tools")
    db = c.app.state.db
    assert "echo_notes" in inspect(db.engine).get_table_names()  # its own revision ran
    assert "echo" in db.revision(), db.revision()
    w = c.post("/worlds", json={}).json()
    auth = {"Authorization": f"Bearer {w['token']}"}
    assert c.post(f"/worlds/{w['id']}/echo/notes", json={"text": "rest"}, headers=auth).status_code == 200
    listed = c.post(f"/worlds/{w['id']}/mcp", headers=auth,
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).json()
    names = {t["name"] for t in listed["result"]["tools"]}
    assert {"echo_add_note", "echo_list_notes"} <= names, names
    called = c.post(f"/worlds/{w['id']}/mcp/echo", headers=auth,
                    json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "echo_add_note", "arguments": {"text": "mcp"}}}).json()
    assert not called["result"]["isError"], called
    with db.session() as s, open_world(s, w["id"], actor="setup") as ctx:
        get_effect("echo.note")(ctx, {"text": "effect"}, None)
    state = c.get(f"/worlds/{w['id']}/state").json()
    texts = sorted(n["text"] for n in state["apps"]["echo"]["notes"])
    assert texts == ["effect", "mcp", "rest"], state["apps"]["echo"]
    fork = c.post(f"/worlds/{w['id']}/fork").json()
    forked = c.get(f"/worlds/{fork['id']}/state").json()["apps"]["echo"]["notes"]
    assert len(forked) == 3
    with db.session() as s, open_world(s, w["id"]) as ctx:
        ok, _ = evaluate_check(ctx, Check(id="x", kind="echo.has_note", args={"text": "mcp"}))
        bad, _ = evaluate_check(ctx, Check(id="y", kind="echo.has_note", args={"text": "nope"}))
    assert ok and not bad
print("ECHO-APP-OK")
"""


def test_a_new_app_needs_only_its_folder(tmp_path: Path) -> None:
    app = tmp_path / "echo"
    app.mkdir()
    for name, text in FILES.items():
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        (app / name).write_text(textwrap.dedent(text).lstrip())
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "ECHO-APP-OK" in out.stdout, out.stdout[-3000:] + out.stderr[-5000:]
