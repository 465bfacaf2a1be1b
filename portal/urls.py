"""URL routes of the portal app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import path

from portal import api, api_budget, api_lifecycle, api_sleep, views
from portal.views.nodes import environment_nodes
from portal.views.tenant_audit import tenant_audit_sink

app_name = "portal"

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
    path("environments/<str:public_id>/", views.environment_detail, name="environment-detail"),
    path(
        "environments/<str:public_id>/progress/",
        views.environment_progress,
        name="environment-progress",
    ),
    path("environments/<str:public_id>/tree/", views.environment_tree, name="environment-tree"),
    path("environments/<str:public_id>/nodes/", environment_nodes, name="environment-nodes"),
    path(
        "environments/<str:public_id>/extend/", views.environment_extend, name="environment-extend"
    ),
    path(
        "environments/<str:public_id>/kubeconfig/",
        views.environment_kubeconfig,
        name="environment-kubeconfig",
    ),
    path(
        "environments/<str:public_id>/manifests.yaml",
        views.environment_manifests,
        name="environment-manifests",
    ),
    path(
        "environments/<str:public_id>/teardown/",
        views.environment_teardown,
        name="environment-teardown",
    ),
    path(
        "environments/<str:public_id>/decide/", views.environment_decide, name="environment-decide"
    ),
    path(
        "environments/<str:public_id>/defer/",
        views.environment_defer,
        name="environment-defer",
    ),
    path(
        "environments/<str:public_id>/keep/",
        views.environment_keep,
        name="environment-keep",
    ),
    path(
        "environments/<str:public_id>/sleep/",
        views.environment_sleep,
        name="environment-sleep",
    ),
    path(
        "environments/<str:public_id>/wake/",
        views.environment_wake,
        name="environment-wake",
    ),
    # Posted by tenant API servers, not people: authenticated by the environment's sink token.
    path("hooks/tenant-audit/<str:public_id>/", tenant_audit_sink, name="tenant-audit-sink"),
]
api_urlpatterns: list = [
    path("environments/", api.EnvironmentListCreateApi.as_view(), name="environment-list"),
    path(
        "environments/estimate/", api.EnvironmentEstimateApi.as_view(), name="environment-estimate"
    ),
    path(
        "environments/<str:public_id>/",
        api.EnvironmentDetailApi.as_view(),
        name="environment-detail",
    ),
    path(
        "environments/<str:public_id>/approve/",
        api.EnvironmentApproveApi.as_view(),
        name="environment-approve",
    ),
    path(
        "environments/<str:public_id>/reject/",
        api.EnvironmentRejectApi.as_view(),
        name="environment-reject",
    ),
    path(
        "environments/<str:public_id>/extend/",
        api.EnvironmentExtendApi.as_view(),
        name="environment-extend",
    ),
    path(
        "environments/<str:public_id>/defer/",
        api_lifecycle.EnvironmentDeferApi.as_view(),
        name="environment-defer",
    ),
    path(
        "environments/<str:public_id>/keep/",
        api_lifecycle.EnvironmentKeepApi.as_view(),
        name="environment-keep",
    ),
    path(
        "environments/<str:public_id>/sleep/",
        api_lifecycle.EnvironmentSleepApi.as_view(),
        name="environment-sleep",
    ),
    path(
        "environments/<str:public_id>/wake/",
        api_lifecycle.EnvironmentWakeApi.as_view(),
        name="environment-wake",
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
