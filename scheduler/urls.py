"""URL routes of the scheduler app: `urlpatterns` (pages and the extender) and `api_urlpatterns`."""

from django.urls import path

from scheduler import api, views

app_name = "scheduler"

urlpatterns: list = [
    path("scheduler/", views.overview, name="overview"),
    path("scheduler/explain", views.score_explain, name="explain"),
    path("scheduler/filter", views.extender_filter, name="extender-filter"),
    path("scheduler/prioritize", views.extender_prioritize, name="extender-prioritize"),
]
api_urlpatterns: list = [
    path("scheduler/nodes/", api.NodeListApi.as_view(), name="nodes"),
    path("scheduler/commitment/", api.CommitmentApi.as_view(), name="commitment"),
]
