"""``/credentials``: named, typed secrets, stored encrypted; values never leave the API.

``POST /credentials`` ``{name, type, values, origins}`` stores (or replaces) one and
answers its description (name, type, value names, public values such as a base URL, the
origins, the provider limits); ``PATCH /credentials/{name}`` ``{origins?, limits?}`` replaces
only those (the
secret need not be sent again: how an admin enables a credential stored before origins
existed); ``GET`` lists or describes; ``DELETE /credentials/{name}`` removes one.
``origins`` lists where nodes may send the credential (``https://api.example.com``,
``https://*.example.com``, ``http://10.0.0.5:8080``); types, origins and storage:
``orchestrator/host/credentials.py``. Credentials belong to the caller's workspace; reading
names and types needs the viewer role, storing, changing or deleting one the admin role.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import ResourceNotFoundError
from orchestrator.host.credentials import DEFAULT_WORKSPACE, CredentialStore, validate

from .auth import role
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["credentials"])


class CredentialIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128)
    type: str
    values: dict[str, str]
    origins: list[str] = Field(default_factory=list, max_length=64,
                               description="scheme://host[:port] (host may start with '*.') the "
                                           "credential may be sent to")
    limits: dict[str, int] = Field(default_factory=dict, max_length=2,
                                   description="the provider's limits for this key, shared by every node "
                                               "using it: rpm (requests/min), tpm (tokens/min)")


class OriginsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    origins: list[str] | None = Field(default=None, max_length=64)
    limits: dict[str, int] | None = Field(default=None, max_length=2)


VIEWER = Depends(role("viewer"))
ADMIN = Depends(role("admin"))


def store_of(services: Services, workspace: str = DEFAULT_WORKSPACE) -> CredentialStore:
    return CredentialStore(services.redis, services.settings, workspace=workspace)


@router.post("/credentials", status_code=201)
async def put_credential(body: CredentialIn, services: Services = Depends(get_services),  # noqa: B008
                         who: Principal = ADMIN) -> dict[str, Any]:
    credential = validate(body.name, body.type, body.values, body.origins, body.limits)
    await store_of(services, who.workspace).put(credential)
    return credential.describe()


@router.patch("/credentials/{name}")
async def set_credential_origins(name: str, body: OriginsIn, services: Services = Depends(get_services),  # noqa: B008
                                 who: Principal = ADMIN) -> dict[str, Any]:
    return (await store_of(services, who.workspace).set_origins(name, body.origins, body.limits)).describe()


@router.get("/credentials")
async def list_credentials(services: Services = Depends(get_services),  # noqa: B008
                           who: Principal = VIEWER) -> dict[str, Any]:
    return {"credentials": await store_of(services, who.workspace).list()}


@router.get("/credentials/{name}")
async def get_credential(name: str, services: Services = Depends(get_services),  # noqa: B008
                         who: Principal = VIEWER) -> dict[str, Any]:
    return (await store_of(services, who.workspace).get(name)).describe()


@router.delete("/credentials/{name}", status_code=204)
async def delete_credential(name: str, services: Services = Depends(get_services),  # noqa: B008
                            who: Principal = ADMIN) -> Response:
    if not await store_of(services, who.workspace).delete(name):
        raise ResourceNotFoundError(f"no credential named {name!r}", parameter="name")
    return Response(status_code=204)
