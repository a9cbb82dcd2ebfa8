"""Sandbox service: microVM lifecycle (issue 3). Wired today: runtime discovery."""

from __future__ import annotations

import shutil
from pathlib import Path

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, Field

from shared.app import create_app as create_service_app
from shared.settings import get_settings

router = APIRouter(tags=["runtimes"])


class RuntimeInfo(BaseModel):
    name: str
    available: bool
    reason: str = Field(description="Why it is or is not usable on this host.")
    memory_checkpoint: bool = Field(description="Whether checkpoints include guest memory.")


def discover_runtimes() -> list[RuntimeInfo]:
    """What this host can run: QEMU microvm, Firecracker, bubblewrap."""
    qemu = shutil.which("qemu-system-x86_64")
    fc = shutil.which("firecracker")
    bwrap = shutil.which("bwrap")
    kvm = Path("/dev/kvm").exists()
    return [
        RuntimeInfo(
            name="microvm",
            available=qemu is not None,
            reason=(
                f"{qemu} ({'KVM device present' if kvm else 'TCG only'})"
                if qemu
                else "qemu-system-x86_64 not on PATH"
            ),
            memory_checkpoint=True,
        ),
        RuntimeInfo(
            name="firecracker",
            available=fc is not None and kvm,
            reason=fc or "firecracker binary not on PATH",
            memory_checkpoint=True,
        ),
        RuntimeInfo(
            name="process",
            available=bwrap is not None,
            reason=bwrap or "bwrap (bubblewrap) not on PATH",
            memory_checkpoint=False,
        ),
    ]


@router.get("/runtimes", response_model=list[RuntimeInfo], operation_id="listRuntimes")
def list_runtimes() -> list[RuntimeInfo]:
    """Runtimes this host offers, and why the missing ones are missing."""
    return discover_runtimes()


def create_app() -> FastAPI:
    return create_service_app(
        "sandbox",
        routers=[router],
        settings=get_settings(),
        description="MicroVM sandboxes: exec, files, pause/resume, checkpoints, fork.",
    )
