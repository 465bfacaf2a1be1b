"""URL routes of the canary app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import path  # noqa: F401

app_name = "canary"

urlpatterns: list = []
api_urlpatterns: list = []

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
