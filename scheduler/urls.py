"""URL routes of the scheduler app: `urlpatterns` (pages) and `api_urlpatterns` (under /api/v1/)."""

from django.urls import path  # noqa: F401

app_name = "scheduler"

urlpatterns: list = []
api_urlpatterns: list = []
