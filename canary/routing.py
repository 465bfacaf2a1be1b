"""Websocket routes of the canary app (mounted by kiln.asgi)."""

from django.urls import path

from canary.consumers import RolloutConsumer, RolloutListStream

websocket_urlpatterns: list = [
    path("ws/rollouts/<str:rollout_id>/", RolloutConsumer.as_asgi()),
    path("ws/lists/rollouts/", RolloutListStream.as_asgi()),
]
