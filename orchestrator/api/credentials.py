"""``/credentials``: named, typed secrets, stored encrypted; values never leave the API.

``POST /credentials`` ``{name, type, values}`` stores (or replaces) one and answers its
description (name, type, value names, public values such as a base URL); ``GET`` lists
or describes; ``DELETE /credentials/{name}`` removes one. Types and storage:
``orchestrator/credentials.py``. Workspace: "default" until API keys carry workspaces.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.credentials import DEFAULT_WORKSPACE, CredentialStore, validate
from orchestrator.kernel.errors import ResourceNotFoundError

from .services import Services, get_services

router = APIRouter(tags=["credentials"])


class CredentialIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128)
    type: str
    values: dict[str, str]


def store_of(services: Services, workspace: str = DEFAULT_WORKSPACE) -> CredentialStore:
    return CredentialStore(services.redis, services.settings, workspace=workspace)


@router.post("/credentials", status_code=201)
async def put_credential(body: CredentialIn, services: Services = Depends(get_services)) -> dict[str, Any]:  # noqa: B008
    credential = validate(body.name, body.type, body.values)
    await store_of(services).put(credential)
    return credential.describe()


@router.get("/credentials")
async def list_credentials(services: Services = Depends(get_services)) -> dict[str, Any]:  # noqa: B008
    return {"credentials": await store_of(services).list()}


@router.get("/credentials/{name}")
async def get_credential(name: str, services: Services = Depends(get_services)) -> dict[str, Any]:  # noqa: B008
    return (await store_of(services).get(name)).describe()


@router.delete("/credentials/{name}", status_code=204)
async def delete_credential(name: str, services: Services = Depends(get_services)) -> Response:  # noqa: B008
    if not await store_of(services).delete(name):
        raise ResourceNotFoundError(f"no credential named {name!r}", parameter="name")
    return Response(status_code=204)
