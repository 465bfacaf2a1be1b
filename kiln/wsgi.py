"""WSGI entry point (management tooling; Kiln serves over ASGI)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kiln.settings")
application = get_wsgi_application()
