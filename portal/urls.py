"""URL routes of the portal app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/).

The actions on one environment are tables: `environments/<public_id>/<action>/`, named
`environment-<action>`, in the pages and the API alike."""

from collections.abc import Callable

from django.urls import URLPattern, path

from portal import api, api_budget, api_lifecycle, api_sleep, views
from portal.views.nodes import environment_nodes
from portal.views.tenant_audit import tenant_audit_sink

app_name = "portal"
ONE = "environments/<str:public_id>/"


def on_environment(actions: dict[str, Callable]) -> list[URLPattern]:
    """`environments/<public_id>/<action>/`, named `environment-<action>`, for each action."""
    return [
        path(f"{ONE}{action}/", view, name=f"environment-{action}")
        for action, view in actions.items()
    ]


urlpatterns: list = [
    path("environments/", views.environment_list, name="environment-list"),
    path("environments/new/", views.environment_request, name="environment-request"),
    path("environments/estimate/", views.environment_estimate, name="environment-estimate"),
    path(
        "environments/policy-check/",
        views.environment_policy_check,
        name="environment-policy-check",
    ),
    path("environments/approvals/", views.approval_queue, name="approval-queue"),
    path("environments/showback/", views.showback, name="showback"),
    path("environments/showback.csv", views.showback_csv, name="showback-csv"),
    path(ONE, views.environment_detail, name="environment-detail"),
    path(f"{ONE}manifests.yaml", views.environment_manifests, name="environment-manifests"),
    *on_environment(
        {
            "progress": views.environment_progress,
            "tree": views.environment_tree,
            "nodes": environment_nodes,
            "extend": views.environment_extend,
            "kubeconfig": views.environment_kubeconfig,
            "teardown": views.environment_teardown,
            "decide": views.environment_decide,
            "defer": views.environment_defer,
            "keep": views.environment_keep,
            "sleep": views.environment_sleep,
            "wake": views.environment_wake,
        }
    ),
    # Posted by tenant API servers, not people: authenticated by the environment's sink token.
    path("hooks/tenant-audit/<str:public_id>/", tenant_audit_sink, name="tenant-audit-sink"),
]

api_urlpatterns: list = [
    path("environments/", api.EnvironmentListCreateApi.as_view(), name="environment-list"),
    path(
        "environments/estimate/", api.EnvironmentEstimateApi.as_view(), name="environment-estimate"
    ),
    path(ONE, api.EnvironmentDetailApi.as_view(), name="environment-detail"),
    *on_environment(
        {
            "approve": api.EnvironmentApproveApi.as_view(),
            "reject": api.EnvironmentRejectApi.as_view(),
            "extend": api.EnvironmentExtendApi.as_view(),
            "defer": api_lifecycle.EnvironmentDeferApi.as_view(),
            "keep": api_lifecycle.EnvironmentKeepApi.as_view(),
            "sleep": api_lifecycle.EnvironmentSleepApi.as_view(),
            "wake": api_lifecycle.EnvironmentWakeApi.as_view(),
        }
    ),
    path(
        "teams/<str:slug>/sleep-schedule/",
        api_sleep.TeamSleepScheduleApi.as_view(),
        name="team-sleep-schedule",
    ),
    path("teams/<slug:slug>/budget/", api_budget.TeamBudgetApi.as_view(), name="team-budget"),
    path(
        "teams/<slug:slug>/budget/raise/",
        api_budget.TeamBudgetRaiseApi.as_view(),
        name="team-budget-raise",
    ),
]
