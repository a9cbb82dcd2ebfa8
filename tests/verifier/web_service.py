"""Shared by the web verifier's tests: a real sandbox service on a free port, and the faked
app that is a screenshot of the reference."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.verifier.web.browser import run_checks
from services.verifier.web.spec import load_web_task
from services.verifier.web.verify import _serve_reference
from shared.clients import SandboxClient
from shared.settings import load_settings
from tests.helpers.asgi import serve

APPS = Path(__file__).parent / "web_apps"


@contextmanager
def sandbox_service(data_dir: Path, runtime: str) -> Iterator[SandboxClient]:
    """The sandbox service (``runtime`` its default) in this process, served over HTTP."""
    from services.sandbox.app import create_app

    settings = load_settings(
        data_dir=data_dir, sandbox={"runtime": runtime, "reaper_interval_s": 3600}
    )
    with serve(create_app(settings, background=False)) as url, SandboxClient(url) as client:
        yield client


def fake_image_app(dest: Path) -> Path:
    """The fake app: a screenshot of the reference, as a page."""
    task = load_web_task("counter_todo")
    shutil.copytree(APPS / "fake_image", dest)
    with _serve_reference(task.reference_dir) as url:
        shot = run_checks(url, task.checks[:1], "w", task.viewport).screenshots["initial"]
    (dest / "shot.png").write_bytes(shot)
    return dest
