"""Benchmarks of the audit app: the transparency log's measurements (`tlog`, run by
`manage.py audit_tlog_bench`). Not imported by the product's code."""
