"""Portal pages: request form with a live estimate, my environments, detail in tabs with live
progress, approval queue and showback. Thin: services and selectors do the work."""

from portal.views.environment import (
    environment_detail,
    environment_extend,
    environment_kubeconfig,
    environment_manifests,
    environment_progress,
    environment_teardown,
    environment_tree,
)
from portal.views.lifecycle import (
    environment_defer,
    environment_keep,
    environment_sleep,
    environment_wake,
)
from portal.views.queue import approval_queue, environment_decide
from portal.views.requests import (
    environment_estimate,
    environment_list,
    environment_policy_check,
    environment_request,
)
from portal.views.showback import showback, showback_csv

__all__ = [
    "approval_queue",
    "environment_decide",
    "environment_defer",
    "environment_detail",
    "environment_estimate",
    "environment_extend",
    "environment_keep",
    "environment_kubeconfig",
    "environment_list",
    "environment_manifests",
    "environment_policy_check",
    "environment_progress",
    "environment_request",
    "environment_sleep",
    "environment_teardown",
    "environment_tree",
    "environment_wake",
    "showback",
    "showback_csv",
]
