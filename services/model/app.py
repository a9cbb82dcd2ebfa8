"""Model service: OpenAI-compatible serving of the K3 architecture (engines come in issue 5)."""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel

from shared.app import create_app as create_service_app
from shared.settings import get_settings

router = APIRouter(tags=["models"])


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "k3stack"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


@router.get("/v1/models", response_model=ModelList, operation_id="listModels")
def list_models(request: Request) -> ModelList:
    """The models this service serves, in OpenAI's shape."""
    s = request.app.state.settings.model
    return ModelList(data=[ModelCard(id=s.served_model_name, created=request.app.state.started)])


def create_app() -> FastAPI:
    app = create_service_app(
        "model",
        routers=[router],
        settings=get_settings(),
        description="OpenAI-compatible serving of the K3 architecture.",
    )
    app.state.started = int(time.time())
    return app
