"""Benchmarks, load tests and demos: a development-only Django app.

Installed only where the development requirements are (kiln.settings.core adds it when
``pytest`` is importable); the production image neither copies nor installs it, so
``manage.py help`` in production lists product commands only. Every command here prints
the JSON that ``bench/results/`` keeps, with its command line, machine and date.
"""
