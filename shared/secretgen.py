"""Create the Helm release's credentials once, inside the cluster: ``python -m shared.secretgen``.

The chart's pre-install/pre-upgrade hook Job runs this so that no random value is ever rendered
by Helm (a ``helm template`` / GitOps render is then identical every time, and PostgreSQL's
initdb password never drifts from the one the services use). The spec names one Secret per
component and, for each key, a *value id* shared between Secrets (the sandbox API key is in the
sandbox's Secret and in the orchestrator's)::

    {"secrets": {"k3s-k3stack-sandbox": {"K3STACK_SANDBOX__API_KEY": "api-key-sandbox"}, ...},
     "explicit": "/input/values.json", "labels": {...}}

Rules: a value that exists in any of the Secrets is reused, never regenerated; a value the chart
user set explicitly (the JSON file of the hook's input Secret) wins and is written where it
differs; any other value is generated (48 hex characters: URL-safe, so it can sit in a database
URL). Secrets are created when missing and patched only with keys they lack or explicit changes.

Talks to the Kubernetes API with the pod's service-account token (stdlib only, so any k3stack
image can run it); ``--api`` and ``--token`` exist for tests.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class Kube:
    """The three calls this needs: get, create and merge-patch a Secret."""

    def __init__(self, api: str, token: str, namespace: str, ca: Path | None) -> None:
        self.base = f"{api.rstrip('/')}/api/v1/namespaces/{namespace}/secrets"
        self.token = token
        self.ctx = ssl.create_default_context(cafile=str(ca)) if ca else None

    def _call(self, method: str, url: str, body: Any = None, ctype: str = "") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if ctype:
            req.add_header("Content-Type", ctype)
        with urllib.request.urlopen(req, timeout=30, context=self.ctx) as resp:
            return json.loads(resp.read() or b"{}")

    def get(self, name: str) -> dict[str, str] | None:
        try:
            obj = self._call("GET", f"{self.base}/{name}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}

    def create(self, name: str, data: dict[str, str], labels: dict[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "labels": labels},
            "data": _encode(data),
        }
        self._call("POST", self.base, body, "application/json")

    def patch(self, name: str, data: dict[str, str]) -> None:
        self._call(
            "PATCH", f"{self.base}/{name}", {"data": _encode(data)}, "application/merge-patch+json"
        )


def _encode(data: dict[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


def generate() -> str:
    return secrets.token_hex(24)


def reconcile(kube: Kube, spec: dict[str, Any], explicit: dict[str, str]) -> dict[str, str]:
    """Bring every Secret of ``spec`` up to date; returns what happened per Secret."""
    wanted: dict[str, dict[str, str]] = spec["secrets"]
    labels = spec.get("labels", {})
    existing = {name: kube.get(name) for name in wanted}
    values: dict[str, str] = {}
    for name, keys in wanted.items():
        for key, value_id in keys.items():
            stored = (existing[name] or {}).get(key)
            if stored and value_id not in values:
                values[value_id] = stored
    values.update({k: v for k, v in explicit.items() if v})
    for keys in wanted.values():
        for value_id in keys.values():
            values.setdefault(value_id, generate())
    report = {}
    for name, keys in wanted.items():
        data = {key: values[value_id] for key, value_id in keys.items()}
        current = existing[name]
        if current is None:
            kube.create(name, data, labels)
            report[name] = "created"
            continue
        changes = {k: v for k, v in data.items() if current.get(k) != v}
        if changes:
            kube.patch(name, changes)
            report[name] = "added or updated " + ", ".join(sorted(changes))
        else:
            report[name] = "unchanged"
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.secretgen", description=__doc__)
    parser.add_argument("--spec", required=True, help="JSON spec (see the module docstring)")
    parser.add_argument("--api", default="https://kubernetes.default.svc")
    parser.add_argument("--token", help="bearer token (default: the service-account token)")
    parser.add_argument("--namespace", help="default: the pod's own namespace")
    args = parser.parse_args(argv)
    spec = json.loads(args.spec)
    token = args.token or (SA_DIR / "token").read_text().strip()
    namespace = args.namespace or (SA_DIR / "namespace").read_text().strip()
    ca = SA_DIR / "ca.crt" if args.api.startswith("https://") else None
    explicit_file = spec.get("explicit")
    explicit = (
        json.loads(Path(explicit_file).read_text())
        if explicit_file and Path(explicit_file).exists()
        else {}
    )
    report = reconcile(Kube(args.api, token, namespace, ca), spec, explicit)
    for name, what in report.items():
        print(f"secret {name}: {what}")  # names only, never values
    return 0


if __name__ == "__main__":
    sys.exit(main())
