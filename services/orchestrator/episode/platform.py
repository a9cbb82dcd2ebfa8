"""The other services an episode run talks to, through the shared clients, typed."""

from __future__ import annotations

from dataclasses import dataclass

from shared.clients import ModelClient, SandboxClient, ToolsClient
from shared.objectstore.base import ObjectStore
from shared.settings import Settings


@dataclass
class Services:
    """The tools, sandbox and model services' clients, the settings, and the object store the
    artefacts go to (none: no artefacts)."""

    tools: ToolsClient
    sandbox: SandboxClient
    model: ModelClient
    settings: Settings
    objects: ObjectStore | None = None
