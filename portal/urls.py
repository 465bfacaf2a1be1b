"""URL routes of the portal app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import path  # noqa: F401

app_name = "portal"

urlpatterns: list = []
api_urlpatterns: list = []
