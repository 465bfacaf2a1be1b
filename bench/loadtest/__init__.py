"""The load test of Kiln's production shape: its processes (`shape`), the HTTP mix driven by
locust (`locustfile`, Django-free), the faults injected during a run (`faults`) and the
reconciliation after it (`reconcile`). `manage.py loadtest` runs them (docs/operations.md)."""
