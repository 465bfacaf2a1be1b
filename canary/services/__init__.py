"""Canary writes: every change to services and rollouts, in a transaction, audited beside it.

One module per concern, re-exported here so callers write `services.rollout_create`:

- `registry`: the services rollouts shift traffic for (and their simulated traffic);
- `rollouts`: creating a rollout and running its analysis tick by tick;
- `steering`: a person's decisions (promote by hand, abort, retry, extend);
- `observations`: metrics pushed for the next tick;
- `machine`: the state machine (the one transition check, the decision that routes traffic);
- `stream`: after commit, the dashboard broadcast and the next tick's task;
- `config`, `validation`: a rollout's AnalysisConfig, and the checks of callers' input.
"""

from canary.services.config import MAX_DURATION_FACTOR, analysis_config, analysis_steps
from canary.services.observations import observation_push
from canary.services.registry import service_create, service_set_simulated_regression
from canary.services.rollouts import (
    ANALYZER,
    rollout_create,
    rollout_field_errors,
    rollout_tick,
    rollouts_tick_due,
)
from canary.services.steering import rollout_abort, rollout_extend, rollout_promote, rollout_retry
from canary.services.stream import broadcast, group_name
from canary.services.validation import CONFIG_KEYS, MAX_EXTENSION_TICKS, MAX_LATENCY_SAMPLES

__all__ = [
    "ANALYZER",
    "CONFIG_KEYS",
    "MAX_DURATION_FACTOR",
    "MAX_EXTENSION_TICKS",
    "MAX_LATENCY_SAMPLES",
    "analysis_config",
    "analysis_steps",
    "broadcast",
    "group_name",
    "observation_push",
    "rollout_abort",
    "rollout_create",
    "rollout_extend",
    "rollout_field_errors",
    "rollout_promote",
    "rollout_retry",
    "rollout_tick",
    "rollouts_tick_due",
    "service_create",
    "service_set_simulated_regression",
]
