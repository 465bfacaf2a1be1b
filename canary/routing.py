"""Websocket routes of the canary app (mounted by kiln.asgi)."""

websocket_urlpatterns: list = []
