"""Kiln project package: settings, urls, asgi, Celery app, identity, observability."""

from kiln.celery import app as celery_app

__all__ = ["celery_app"]
