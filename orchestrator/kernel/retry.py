"""Retry decisions and backoff delays for a node's retry policy."""

from __future__ import annotations

import random

from .errors import CoercionError, ControlSignal, EvaluationError, GraphError, RetryRequested, UsageBudgetError
from .graph import RetryPolicy


def backoff_s(policy: RetryPolicy, failed_attempt: int, rng: random.Random | None = None) -> float:
    """Delay before attempt ``failed_attempt + 1``: exponential, capped, with full jitter."""
    base = min(policy.max_interval_s, policy.initial_interval_s * policy.backoff_factor ** (failed_attempt - 1))
    if policy.jitter:
        return (rng or random).uniform(base / 2, base)
    return base


def is_retryable(policy: RetryPolicy, exc: BaseException) -> bool:
    """Deterministic failures (graph errors, expression and coercion errors) and control
    signals never retry; an explicit RetryRequested always does."""
    if isinstance(exc, RetryRequested):
        return True
    if isinstance(exc, GraphError | ControlSignal | EvaluationError | CoercionError | UsageBudgetError):
        return False
    if policy.retry_on is None:
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names.intersection(policy.retry_on))
