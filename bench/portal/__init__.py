"""The provisioning benchmark (`manage.py provision_bench`): `harness` drives environment
requests through the API, the policy gate, approval, Celery and the simulated cluster;
`report` turns what it observed into the figures the command prints."""
