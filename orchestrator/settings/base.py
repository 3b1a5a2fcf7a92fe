"""The base of every settings group: read from the environment, prefix ``ORCH_``."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class SettingsGroup(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ORCH_", extra="ignore")
