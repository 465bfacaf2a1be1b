"""Routes of the identity API, mounted under /api/v1/ by kiln/urls.py."""

from django.urls import path

from kiln import api

api_urlpatterns = [
    path("me/", api.MeApi.as_view(), name="me"),
    path("teams/", api.TeamListCreateApi.as_view(), name="team-list"),
    path("teams/<slug:slug>/members/", api.TeamMemberAddApi.as_view(), name="team-member-add"),
]
