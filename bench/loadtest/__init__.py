"""The load test of Kiln's production shape: its processes (`tests/support/shape.py`), the HTTP
mix driven by locust (`locustfile` and what its users share, `locust_shared`: both Django-free),
the faults injected during a run (`faults`) and the reconciliation after it (`reconcile`).
`manage.py loadtest` runs them (docs/operations.md)."""
