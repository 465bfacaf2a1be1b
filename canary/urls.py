"""URL routes of the canary app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import path

from canary import api, views

app_name = "canary"

# --- rollouts (canary/views.py, canary/api.py) ---
urlpatterns: list = [
    path("rollouts/", views.rollout_list, name="rollout-list"),
    path("rollouts/new/", views.rollout_new, name="rollout-new"),
    path("rollouts/<uuid:rollout_id>/", views.rollout_detail, name="rollout-detail"),
    path("rollouts/<uuid:rollout_id>/action/", views.rollout_action, name="rollout-action"),
]
api_urlpatterns: list = [
    path("canary/services/", api.ServiceListCreateApi.as_view(), name="service-list"),
    path("rollouts/", api.RolloutListCreateApi.as_view(), name="rollout-list"),
    path("rollouts/<str:rollout_id>/", api.RolloutDetailApi.as_view(), name="rollout-detail"),
    path("rollouts/<str:rollout_id>/abort/", api.RolloutAbortApi.as_view(), name="rollout-abort"),
    path(
        "rollouts/<str:rollout_id>/promote/",
        api.RolloutPromoteApi.as_view(),
        name="rollout-promote",
    ),
    path("rollouts/<str:rollout_id>/retry/", api.RolloutRetryApi.as_view(), name="rollout-retry"),
    path("rollouts/<str:rollout_id>/extend/", api.RolloutExtendApi.as_view(), name="rollout-extend"),
    path(
        "rollouts/<str:rollout_id>/observations/",
        api.RolloutObservationApi.as_view(),
        name="rollout-observations",
    ),
]

# --- chaos experiments (canary/chaos_views.py, canary/chaos_api.py) ---
from canary import chaos_api, chaos_views  # noqa: E402

urlpatterns += [
    path("chaos/", chaos_views.experiment_list, name="experiment-list"),
    path("chaos/new/", chaos_views.experiment_create, name="experiment-create"),
    path("chaos/<uuid:experiment_id>/", chaos_views.experiment_detail, name="experiment-detail"),
    path("chaos/<uuid:experiment_id>/lease/", chaos_views.experiment_lease, name="experiment-lease"),
    path("chaos/<uuid:experiment_id>/abort/", chaos_views.experiment_abort, name="experiment-abort"),
]
api_urlpatterns += [
    path("chaos/experiments/", chaos_api.ExperimentListCreateApi.as_view(), name="experiment-list"),
    path("chaos/experiments/<uuid:experiment_id>/", chaos_api.ExperimentDetailApi.as_view(), name="experiment-detail"),
    path("chaos/experiments/<uuid:experiment_id>/abort/", chaos_api.ExperimentAbortApi.as_view(), name="experiment-abort"),
]
