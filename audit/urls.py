"""URL routes of the audit app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import path

from audit import api, views
from audit.tree import api as tree_api

app_name = "audit"

urlpatterns = [
    path("audit/", views.explorer, name="explorer"),
    path("audit/events/<int:seq>/", views.event_detail, name="event-detail"),
    path("audit/status/", views.status_panel, name="status"),
    path("audit/public-key/", views.public_key, name="public-key"),
    path("audit/verify/", views.verify_now, name="verify"),
    path("audit/tlog_verify.py", views.verifier_script, name="verifier"),
    path("audit/tlog/checkpoint", tree_api.TlogCheckpointApi.as_view(), name="tlog-checkpoint"),
    path("audit/tlog/cosignature", tree_api.TlogCosignatureApi.as_view(), name="tlog-cosignature"),
    path(
        "audit/tlog/tile/entries/<path:rest>", tree_api.TlogTileApi.as_view(), name="tlog-entries"
    ),
    path(
        "audit/tlog/tile/<int:level>/<path:rest>", tree_api.TlogTileApi.as_view(), name="tlog-tile"
    ),
]
api_urlpatterns = [
    path("audit/events/", api.AuditEventListApi.as_view(), name="events"),
    path("audit/export", api.AuditExportApi.as_view(), name="export"),
    path("audit/events/<int:seq>/proof", tree_api.AuditEventProofApi.as_view(), name="event-proof"),
    path(
        "audit/proofs/inclusion", tree_api.AuditInclusionProofApi.as_view(), name="proof-inclusion"
    ),
    path(
        "audit/proofs/consistency",
        tree_api.AuditConsistencyProofApi.as_view(),
        name="proof-consistency",
    ),
]
