"""URL routes of the audit app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import URLPattern, path

from audit import api, views
from audit.tree import api as tree_api

app_name = "audit"


def audit(route: str, view, name: str) -> URLPattern:
    """The route `audit/<route>` (a page, the tlog's tiles, or under /api/v1/ an API view)."""
    return path(f"audit/{route}", view, name=name)


urlpatterns = [
    audit("", views.explorer, "explorer"),
    audit("events/<int:seq>/", views.event_detail, "event-detail"),
    audit("status/", views.status_panel, "status"),
    audit("public-key/", views.public_key, "public-key"),
    audit("verify/", views.verify_now, "verify"),
    audit("tlog_verify.py", views.verifier_script, "verifier"),
    # The C2SP tlog endpoints: the signed checkpoint, witness cosignatures and the tiles.
    audit("tlog/checkpoint", tree_api.TlogCheckpointApi.as_view(), "tlog-checkpoint"),
    audit("tlog/cosignature", tree_api.TlogCosignatureApi.as_view(), "tlog-cosignature"),
    audit("tlog/tile/entries/<path:rest>", tree_api.TlogTileApi.as_view(), "tlog-entries"),
    audit("tlog/tile/<int:level>/<path:rest>", tree_api.TlogTileApi.as_view(), "tlog-tile"),
]
api_urlpatterns = [
    audit("events/", api.AuditEventListApi.as_view(), "events"),
    audit("export", api.AuditExportApi.as_view(), "export"),
    audit("events/<int:seq>/proof", tree_api.AuditEventProofApi.as_view(), "event-proof"),
    audit("proofs/inclusion", tree_api.AuditInclusionProofApi.as_view(), "proof-inclusion"),
    audit("proofs/consistency", tree_api.AuditConsistencyProofApi.as_view(), "proof-consistency"),
]
