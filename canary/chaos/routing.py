"""Websocket routes of the chaos app (listed in settings.KILN_WEBSOCKET_ROUTES)."""

from django.urls import path

from canary.chaos.consumers import ExperimentListStream

websocket_urlpatterns: list = [
    path("ws/lists/experiments/", ExperimentListStream.as_asgi()),
]
