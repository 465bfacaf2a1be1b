"""Kiln settings, read from the environment (docs/configuration.md lists every variable).

Standalone mode (the default when neither DATABASE_URL nor REDIS_URL is set, or
when KILN_STANDALONE=1) swaps only transports: SQLite under var/, the in-memory
channel layer and Celery's memory transport. Every other variable still
overrides standalone's defaults.

`DJANGO_SETTINGS_MODULE=kiln.settings` loads this package; one module per topic,
each reading the environment helpers and paths of `environ`:

- `environ`: env()/env_bool()/env_int()/env_float(), BASE_DIR, VAR_DIR, STANDALONE;
- `core`: Django itself (apps, middleware, URLs, data, security, static, logs);
- `identity`: sign-in, JWT, login throttling, the REST API and its schema;
- `subsystems`: Celery and the audit chain, delivery, portal, scheduler, chaos, canary.
"""

from kiln.settings.core import *  # noqa: F403
from kiln.settings.environ import *  # noqa: F403
from kiln.settings.identity import *  # noqa: F403
from kiln.settings.subsystems import *  # noqa: F403
