"""What a Kiln process loads when it starts: only what every process needs.

The suite starts about a hundred Python processes (workers, servers, Celery, commands), and a
production deployment starts one per web worker and Celery child. Three libraries were loaded by
every one of them and used by few: numba (the extender's name lookup), the kubernetes client
(the kubernetes delivery backend and the node watcher) and cel-python's parser (the policy gate).
Together they were a fifth of a start's import time (docs/operations.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import sys
import django
django.setup()
import portal.policy
loaded = sorted(m for m in ("numba", "kubernetes", "llvmlite") if m in sys.modules)
print(loaded, portal.policy._env is None)
"""


def _started() -> str:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kiln.settings"}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def test_a_started_process_loads_neither_numba_nor_the_kubernetes_client_nor_a_cel_parser():
    assert _started() == "[] True"


def test_the_libraries_load_where_they_are_used(settings):
    # The lazy imports still reach them: a policy compiles, the kubernetes backend is built.
    from kiln.cluster.backends import get_backend
    from portal import policy

    assert policy._program("1 + 1 == 2") is not None and policy._env is not None
    settings.KILN_KUBE_API_URL = "http://127.0.0.1:9"
    assert type(get_backend("kubernetes")).__name__ == "KubernetesBackend"
