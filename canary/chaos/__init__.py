"""Chaos experiments held by leases: a fault exists only while a controller holds its lease.

Its own Django app (label `chaos`) inside `canary/`: models, services, selectors, api,
views, tasks, the controller and the reaper, the actuators that write faults through the
delivery backend, and the pure lease arithmetic (`leases.py`). docs/chaos.md explains it.
"""
