"""agentflow orchestrator: a distributed runtime for agent workflows."""

__version__ = "0.1.0"
