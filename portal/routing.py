"""Websocket routes of the portal (listed in settings.KILN_WEBSOCKET_ROUTES)."""

from django.urls import path

from portal.consumers import EnvironmentListStream

websocket_urlpatterns: list = [
    path("ws/lists/environments/", EnvironmentListStream.as_asgi()),
]
