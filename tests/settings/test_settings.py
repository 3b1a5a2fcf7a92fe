"""Settings split by concern: every group reads its own ORCH_* variables, ``Settings`` is
all of them (the names and defaults of the single object it replaced), and a subsystem's
group holds what it reads and nothing of another concern."""

from __future__ import annotations

import pytest

from orchestrator.settings import (
    ApiSettings,
    EgressSettings,
    KernelLimits,
    ModelSettings,
    SandboxSettings,
    Settings,
    StorageSettings,
    StoreSettings,
    TelemetrySettings,
    WorkerSettings,
    load_settings,
)

GROUPS = (StoreSettings, KernelLimits, WorkerSettings, EgressSettings, StorageSettings, SandboxSettings,
          ApiSettings, ModelSettings, TelemetrySettings)


def test_settings_is_every_group_and_no_field_is_in_two() -> None:
    seen: dict[str, str] = {}
    for group in GROUPS:
        assert issubclass(Settings, group)
        for name in group.model_fields:
            assert name not in seen, f"{name} is in {seen.get(name)} and {group.__name__}"
            seen[name] = group.__name__
    assert set(seen) == set(Settings.model_fields)
    # the 100 fields of the one object this split replaced, telemetry's 4, a sandbox cap, the broker URL,
    # model_limits, child runs' 2, Wait nodes' 3, the cluster's 4, lanes (2), the workspace ceiling's 2,
    # the event streams' send stall
    assert len(seen) == 123


def test_each_group_reads_its_orch_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://example:1/0")
    monkeypatch.setenv("ORCH_NODE_LEASE_S", "7.5")
    monkeypatch.setenv("ORCH_EGRESS_ALLOW", "10.0.0.0/8")
    monkeypatch.setenv("ORCH_SANDBOX_SCRATCH_MB", "32")
    monkeypatch.setenv("ORCH_GRAPH_MAX_NODES", "12")
    assert StoreSettings().redis_url == "redis://example:1/0"
    assert WorkerSettings().node_lease_s == 7.5
    assert EgressSettings().egress_allow == "10.0.0.0/8"
    assert SandboxSettings().sandbox_scratch_mb == 32
    assert KernelLimits().graph_limits().max_nodes == 12
    whole = Settings()
    assert (whole.redis_url, whole.node_lease_s, whole.sandbox_scratch_mb) == ("redis://example:1/0", 7.5, 32)


def test_a_group_holds_nothing_of_another_concern() -> None:
    assert "api_keys" not in StoreSettings.model_fields
    assert "redis_url" not in ApiSettings.model_fields
    assert "sandbox_allow_weak" not in WorkerSettings.model_fields


def test_a_bad_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_NODE_LEASE_S", "soon")
    with pytest.raises(ValueError, match="node_lease_s"):
        Settings()


def test_the_entry_points_loader_reads_once() -> None:
    load_settings.cache_clear()
    try:
        assert load_settings() is load_settings()
    finally:
        load_settings.cache_clear()
