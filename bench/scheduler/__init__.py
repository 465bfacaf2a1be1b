"""Benchmarks of the scheduler: the extender's latency for synthetic nodes (`extender`, run by
`manage.py scheduler_bench` and its alias `extender_bench`) and pending pods bound in the
simulated cluster through the extender (`cluster`, run by `manage.py cluster_bench`)."""
