"""URL routes of the canary app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/).

Chaos experiments have their own routes in canary/chaos/urls.py.
"""

from django.urls import path

from canary import api, api_services, views

app_name = "canary"

urlpatterns: list = [
    path("rollouts/", views.rollout_list, name="rollout-list"),
    path("rollouts/new/", views.rollout_new, name="rollout-new"),
    path("rollouts/<uuid:rollout_id>/", views.rollout_detail, name="rollout-detail"),
    path("rollouts/<uuid:rollout_id>/action/", views.rollout_action, name="rollout-action"),
]
api_urlpatterns: list = [
    path("canary/services/", api_services.ServiceListCreateApi.as_view(), name="service-list"),
    path("rollouts/", api.RolloutListCreateApi.as_view(), name="rollout-list"),
    path("rollouts/<str:rollout_id>/", api.RolloutDetailApi.as_view(), name="rollout-detail"),
    *(
        path(f"rollouts/<str:rollout_id>/{action}/", view.as_view(), name=f"rollout-{action}")
        for action, view in api.ROLLOUT_ACTIONS.items()
    ),
]
