"""Benchmarks, load tests and demos: a development-only Django app.

Installed only where the development requirements are (kiln.settings.core adds it when
``pytest`` is importable); the production image neither copies nor installs it, so
``manage.py help`` in production lists product commands only. Every command here prints
the JSON that ``bench/results/`` keeps, with its command line, machine and date.

The commands are in ``management/commands/``, their modules by area: ``audit/``, ``canary/``
(and ``make dev``'s traffic and Prometheus), ``chaos/``, ``portal/``, ``scheduler/`` and
``loadtest/``; ``database.py`` gives the processes a benchmark starts this one's database.
What they run against besides Kiln (the kube-apiserver and Argo CD stand-ins, the production
shape as local processes) lives with the tests, in ``tests/support/``. Nothing in the product
imports this package (tests/bench/test_product_apps.py).
"""
