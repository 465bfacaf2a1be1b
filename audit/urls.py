"""URL routes of the audit app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import path

from audit import api, views

app_name = "audit"

urlpatterns = [
    path("audit/", views.explorer, name="explorer"),
    path("audit/events/<int:seq>/", views.event_detail, name="event-detail"),
    path("audit/status/", views.status_panel, name="status"),
    path("audit/public-key/", views.public_key, name="public-key"),
    path("audit/verify/", views.verify_now, name="verify"),
]
api_urlpatterns = [
    path("audit/events/", api.AuditEventListApi.as_view(), name="events"),
    path("audit/export", api.AuditExportApi.as_view(), name="export"),
]
