"""Which policy drives a session."""

from __future__ import annotations

from apps.agents.offline.policy import OfflineSearchPolicy
from apps.agents.policy import Policy
from apps.runs.config import SessionConfig
from apps.runs.models import OptimizationSession


def policy_for(session: OptimizationSession, config: SessionConfig) -> Policy:
    if config.policy == "claude":
        from apps.agents.claude.policy import ClaudePolicy

        return ClaudePolicy.from_settings(model=config.model)
    return OfflineSearchPolicy(blank_prior=config.offline_prior == "blank")
