"""URL routes of the chaos app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/).

The paths are those chaos had while it lived inside canary: `/chaos/...` pages and
`/api/v1/chaos/experiments/...`.
"""

from django.urls import URLPattern, path

from canary.chaos import api, api_faults, views, views_faults

app_name = "chaos"


def chaos(route: str, view, name: str) -> URLPattern:
    """The route `chaos/<route>` (a page, or under /api/v1/ an API view), named `name`."""
    return path(f"chaos/{route}", view, name=name)


EXPERIMENT = "<uuid:experiment_id>/"
INJECTION = EXPERIMENT + "injections/<int:injection_id>/"

urlpatterns: list = [
    chaos("", views.experiment_list, "experiment-list"),
    chaos("new/", views.experiment_create, "experiment-create"),
    chaos("levers/", views.lever_list, "lever-list"),
    chaos("levers/platform/<str:action>/", views.lever_move, "lever-move"),
    chaos("levers/teams/<slug:team>/<str:action>/", views.lever_move, "team-lever-move"),
    chaos(EXPERIMENT, views.experiment_detail, "experiment-detail"),
    chaos(EXPERIMENT + "lease/", views.experiment_lease, "experiment-lease"),
    chaos(EXPERIMENT + "abort/", views.experiment_abort, "experiment-abort"),
    chaos(INJECTION + "recheck/", views_faults.injection_recheck, "injection-recheck"),
]
api_urlpatterns: list = [
    chaos("experiments/", api.ExperimentListCreateApi.as_view(), "experiment-list"),
    chaos("experiments/" + EXPERIMENT, api.ExperimentDetailApi.as_view(), "experiment-detail"),
    chaos(
        "experiments/" + EXPERIMENT + "abort/", api.ExperimentAbortApi.as_view(), "experiment-abort"
    ),
    chaos(
        "experiments/" + INJECTION + "recheck/",
        api_faults.InjectionRecheckApi.as_view(),
        "injection-recheck",
    ),
    chaos("levers/", api.LeverListApi.as_view(), "lever-list"),
    chaos("levers/platform/engage/", api.PlatformLeverEngageApi.as_view(), "lever-engage"),
    chaos("levers/platform/release/", api.PlatformLeverReleaseApi.as_view(), "lever-release"),
    chaos(
        "levers/teams/<slug:team>/engage/", api.TeamLeverEngageApi.as_view(), "team-lever-engage"
    ),
    chaos(
        "levers/teams/<slug:team>/release/", api.TeamLeverReleaseApi.as_view(), "team-lever-release"
    ),
]
