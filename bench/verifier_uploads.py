"""Time to refuse each bad upload of issue 39, over real HTTP (uvicorn on a free port).

    .venv/bin/python bench/verifier_uploads.py

Each case is a 4xx naming the field; the 30 MB app is refused from its Content-Length, before
the body is read or parsed (it took 8.4 s before the body cap). Prints status, seconds, message.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WEB = "counter_todo"
CASES = {
    "web: a 30 MB app": ("/verify/web", {"task": WEB, "files": {"index.html": "x" * (30 << 20)}}),
    "web: file/folder clash": ("/verify/web", {"task": WEB, "files": {"a": "x", "a/b.html": "y"}}),
    "web: 300-character name": ("/verify/web", {"task": WEB, "files": {"n" * 300 + ".html": "x"}}),
    "web: lone surrogate": ("/verify/web", {"task": WEB, "files": {"index.html": "a\ud800"}}),
    "kernel: candidate.py and candidate.py/x.py": (
        "/verify/kernel",
        {"task": "softmax", "files": {"candidate.py": "x = 1\n", "candidate.py/x.py": "y = 1\n"}},
    ),
    "kernel: 300-character name": (
        "/verify/kernel",
        {"task": "softmax", "files": {"k" * 300 + ".py": "def softmax(x):\n    return x\n"}},
    ),
}


def main() -> None:
    os.environ.update(K3STACK_AUTH_ENABLED="false", K3STACK_CELERY_EAGER="true",
                      K3STACK_DATA_DIR=tempfile.mkdtemp(prefix="k3s-bench-uploads-"))  # fmt: skip
    os.environ.pop("K3STACK_DATABASE_URL", None)
    os.environ.pop("K3STACK_OBJECT_STORE_URL", None)
    from services.verifier.app import create_app
    from tests.helpers.asgi import serve

    with serve(create_app()) as url:
        for name, (path, body) in CASES.items():
            raw = json.dumps(body).encode()  # a lone surrogate goes as its \ud800 escape
            t0 = time.perf_counter()
            resp = httpx.post(url + path, content=raw, timeout=60,
                              headers={"content-type": "application/json"})  # fmt: skip
            took = time.perf_counter() - t0
            print(f"{name:45s} {resp.status_code} {took:6.2f} s  {resp.json()['message'][:90]}")


if __name__ == "__main__":
    main()
