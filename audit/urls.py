"""URL routes of the audit app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import path  # noqa: F401

app_name = "audit"

urlpatterns: list = []
api_urlpatterns: list = []
