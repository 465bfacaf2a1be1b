"""URL routes of the chaos app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/).

The paths are those chaos had while it lived inside canary: `/chaos/...` pages and
`/api/v1/chaos/experiments/...`.
"""

from django.urls import path

from canary.chaos import api, api_faults, views, views_faults

app_name = "chaos"

urlpatterns: list = [
    path("chaos/", views.experiment_list, name="experiment-list"),
    path("chaos/new/", views.experiment_create, name="experiment-create"),
    path("chaos/levers/", views.lever_list, name="lever-list"),
    path("chaos/levers/platform/<str:action>/", views.lever_move, name="lever-move"),
    path("chaos/levers/teams/<slug:team>/<str:action>/", views.lever_move, name="team-lever-move"),
    path("chaos/<uuid:experiment_id>/", views.experiment_detail, name="experiment-detail"),
    path("chaos/<uuid:experiment_id>/lease/", views.experiment_lease, name="experiment-lease"),
    path("chaos/<uuid:experiment_id>/abort/", views.experiment_abort, name="experiment-abort"),
    path(
        "chaos/<uuid:experiment_id>/injections/<int:injection_id>/recheck/",
        views_faults.injection_recheck,
        name="injection-recheck",
    ),
]
api_urlpatterns: list = [
    path("chaos/experiments/", api.ExperimentListCreateApi.as_view(), name="experiment-list"),
    path(
        "chaos/experiments/<uuid:experiment_id>/",
        api.ExperimentDetailApi.as_view(),
        name="experiment-detail",
    ),
    path(
        "chaos/experiments/<uuid:experiment_id>/abort/",
        api.ExperimentAbortApi.as_view(),
        name="experiment-abort",
    ),
    path(
        "chaos/experiments/<uuid:experiment_id>/injections/<int:injection_id>/recheck/",
        api_faults.InjectionRecheckApi.as_view(),
        name="injection-recheck",
    ),
    path("chaos/levers/", api.LeverListApi.as_view(), name="lever-list"),
    path(
        "chaos/levers/platform/engage/", api.PlatformLeverEngageApi.as_view(), name="lever-engage"
    ),
    path(
        "chaos/levers/platform/release/",
        api.PlatformLeverReleaseApi.as_view(),
        name="lever-release",
    ),
    path(
        "chaos/levers/teams/<slug:team>/engage/",
        api.TeamLeverEngageApi.as_view(),
        name="team-lever-engage",
    ),
    path(
        "chaos/levers/teams/<slug:team>/release/",
        api.TeamLeverReleaseApi.as_view(),
        name="team-lever-release",
    ),
]
