"""URL routes of the canary app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/).

Chaos experiments have their own routes in canary/chaos/urls.py.
"""

from django.urls import URLPattern, path

from canary import api, api_services, views

app_name = "canary"


def rollouts(route: str, view, name: str) -> URLPattern:
    """The route `rollouts/<route>` (a page, or under /api/v1/ an API view), named `name`."""
    return path(f"rollouts/{route}", view, name=name)


urlpatterns: list = [
    rollouts("", views.rollout_list, "rollout-list"),
    rollouts("new/", views.rollout_new, "rollout-new"),
    rollouts("<uuid:rollout_id>/", views.rollout_detail, "rollout-detail"),
    rollouts("<uuid:rollout_id>/action/", views.rollout_action, "rollout-action"),
]
api_urlpatterns: list = [
    path("canary/services/", api_services.ServiceListCreateApi.as_view(), name="service-list"),
    rollouts("", api.RolloutListCreateApi.as_view(), "rollout-list"),
    rollouts("<str:rollout_id>/", api.RolloutDetailApi.as_view(), "rollout-detail"),
    # One POST per decision on a rollout, or a pushed observation, named by its last segment.
    *(
        rollouts(f"<str:rollout_id>/{action}/", view.as_view(), f"rollout-{action}")
        for action, view in api.ROLLOUT_ACTIONS.items()
    ),
]
