"""Portal tables, one module per part (as NetBox's `models/` packages): environments and their
requests, decisions and steps; a team's schedule, webhook and notifications; tenant audit;
budgets. Every model is importable from `portal.models`."""

from portal.models.budgets import BudgetNotice, BudgetRaise, TeamBudget
from portal.models.environments import (
    ApprovalDecision,
    EnvClass,
    Environment,
    EnvironmentRequest,
    PolicyDecision,
    ProvisioningStep,
    WorkloadClass,
    _new_public_id,
)
from portal.models.teams import Notification, SleepSchedule, TeamWebhook
from portal.models.tenant_audit import TenantAuditEvent, TenantAuditToken

__all__ = [
    "ApprovalDecision",
    "BudgetNotice",
    "BudgetRaise",
    "EnvClass",
    "Environment",
    "EnvironmentRequest",
    "Notification",
    "PolicyDecision",
    "ProvisioningStep",
    "SleepSchedule",
    "TeamBudget",
    "TeamWebhook",
    "TenantAuditEvent",
    "TenantAuditToken",
    "WorkloadClass",
    "_new_public_id",  # the public id's default, named so by migration 0003
]
