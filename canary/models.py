"""Tables of this app (none yet)."""

from canary.models_chaos import *  # noqa: F401,F403,E402
