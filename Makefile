# Kiln. `make run` (standalone) and `make test` are the two set-up commands; see README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000

# The test and dev targets talk to real PostgreSQL and Redis.
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/kiln
export REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: run test dev db bench loadtest lint services browser prometheus-tools screenshots lock clean deploy-check

# Outside standalone SECRET_KEY is required; these two local targets use a throwaway one.
test dev db bench bench-% screenshots deploy-check: export SECRET_KEY ?= insecure-local-test-and-dev-key-never-used-in-production
dev: export KILN_SECURE_COOKIES ?= 0

# The development lock: the runtime lock's packages (the image installs only those) plus tests,
# benchmarks and lint, every file checked against its hash.
$(VENV)/.installed: requirements.lock requirements-dev.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r requirements-dev.lock
	touch $@

## run: standalone mode on http://127.0.0.1:$(PORT) (SQLite, in-process worker, simulated cluster)
# One line per stage (installing, migrating, seeding, starting) with the seconds since it began.
run: RUN_STARTED := $(shell date +%s.%N)
run:
	@printf 'kiln %7.1f s  %-11s %s\n' 0 installing "requirements-dev.lock into $(VENV) when it changed (the first run takes minutes)"
	@$(MAKE) -s --no-print-directory $(VENV)/.installed
	@env -u DATABASE_URL -u REDIS_URL KILN_RUN_STARTED=$(RUN_STARTED) $(PY) manage.py standalone --port $(PORT)

## services: make sure PostgreSQL and Redis answer, starting local servers that are down
services:
	@if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then \
	  echo "starting PostgreSQL"; \
	  pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | head -1) main start; \
	fi
	@if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then \
	  echo "starting Redis"; \
	  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no; \
	fi
	@for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && exit 0; sleep 1; done; \
	  echo "PostgreSQL or Redis does not answer" >&2; exit 1

## browser: Chromium for the end-to-end tests (Debian packages): its headless shell, which runs
## them, and the full browser, which runs the navigation walk too and takes the docs' screenshots
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromium-headless-shell || { \
	  echo "installing chromium and chromium-headless-shell from Debian packages"; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    chromium chromium-headless-shell >/dev/null; }

## prometheus-tools: Debian's prometheus package: promtool for the metrics and alert rule tests,
## and the server, which the canary tests start on loopback themselves (bench/canary/
## prometheus_server.py) like PostgreSQL and Redis; the package's own service is not left running
prometheus-tools:
	@test -x /usr/bin/promtool || { \
	  echo "installing prometheus (promtool) from Debian packages"; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends prometheus >/dev/null; \
	  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then \
	    $$SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || :; fi; }

## test: the whole suite against PostgreSQL and Redis, as two pytest runs: the rest, then the
## tests marked slow (tests/conftest.py: browsers, real processes, faults; mostly waiting) on a
## test database and Redis databases of their own (TEST_ORDER=beside: both at once, the slow
## run's output after). Each
## run spreads its test files over TEST_WORKERS pytest-xdist workers (0: in one process), each
## worker on its own test database (pytest-django suffixes it) and Redis database (the run's
## database number plus the worker's index: tests/conftest.py), so the fast run takes Redis
## databases 0 and 1 and the slow run TEST_SLOW_REDIS_DB and the four above it (2 to 6).
## docs/operations.md has the timings.
TEST_SLOW_REDIS_DB ?= 2
# The fast run on two workers (one a core), then the slow run on five (its tests mostly wait on
# browsers and processes; the browser tests are two of its units): docs/operations.md "The test
# suite's time". TEST_WORKERS=0 runs the fast run in one process.
TEST_WORKERS ?= 2
TEST_SLOW_WORKERS ?= 5
# after: the slow run once the fast one is done; beside: both at once (the slow run's output
# follows). About as fast on two cores, after uses less CPU and leaves the slow run's waits
# uncontended (docs/operations.md).
TEST_ORDER ?= after
# Each file one unit, the long ones handed out first; in the slow run the browser tests as one
# unit on one worker, one standalone server for them all (tests/conftest.py
# FilesAndBrowserScheduling).
TEST_DIST = --dist loadgroup
TEST_SLOW_DIST = --dist loadgroup
# The suite starts about a hundred Python processes (workers, servers, Celery, commands). Where
# the environment sets PYTHONDONTWRITEBYTECODE none of them writes its bytecode, so each compiled
# Kiln's modules again; compiled once here, every process reads them (the flag stops only writes).
test: $(VENV)/.installed services browser prometheus-tools
	$(PY) -m compileall -q -j 0 kiln portal canary scheduler audit bench tests
	$(PY) manage.py audit_setup_roles
	@case "$(TEST_ORDER)" in after|beside) ;; *) echo "TEST_ORDER is after or beside" >&2; exit 2;; esac
	@mkdir -p var; db="$${DATABASE_URL%%\?*}"; \
	  slow_run() { DATABASE_URL="$${db}_slow" REDIS_URL="$${REDIS_URL%/*}/$(TEST_SLOW_REDIS_DB)" \
	    $(PY) -m pytest -p no:cacheprovider -n $(TEST_SLOW_WORKERS) $(TEST_SLOW_DIST) -m slow; }; \
	  if [ "$(TEST_ORDER)" = beside ]; then \
	    slow_run > var/test-slow.log 2>&1 & slow=$$!; \
	    $(PY) -m pytest -p no:cacheprovider -n $(TEST_WORKERS) $(TEST_DIST) -m "not slow"; fast=$$?; \
	    wait $$slow; slow_rc=$$?; \
	    echo "=== the tests marked slow, run beside the others (var/test-slow.log) ==="; \
	    cat var/test-slow.log; \
	  else \
	    $(PY) -m pytest -p no:cacheprovider -n $(TEST_WORKERS) $(TEST_DIST) -m "not slow"; fast=$$?; \
	    echo "=== the tests marked slow, run after the others ==="; \
	    slow_run; slow_rc=$$?; \
	  fi; \
	  echo "not slow: pytest exit $$fast; slow: pytest exit $$slow_rc"; \
	  exit $$(( fast != 0 || slow_rc != 0 ))

## dev: the production shape - web (WEB_PROCESSES, default 2: one per core, their metrics summed
## at /metrics), worker, beat and audit writer as separate processes; beside them Debian's
## Prometheus on DEV_PROMETHEUS_PORT scraping, every 5 s, the Istio metrics canary_dev_traffic
## serves on DEV_TRAFFIC_PORT for the services read from Prometheus (the demo's payments-prod/cart),
## so their rollouts are judged from a real server (KILN_PROMETHEUS_URL points at it)
WEB_PROCESSES ?= 2
DEV_PROMETHEUS_PORT ?= 9090
DEV_TRAFFIC_PORT ?= 9471
dev: export KILN_PROMETHEUS_URL ?= http://127.0.0.1:$(DEV_PROMETHEUS_PORT)
# X-Forwarded-For is believed only from KILN_TRUSTED_PROXIES (default none), by uvicorn and
# Kiln alike (kiln/proxies.py); uvicorn's own default would trust loopback.
KILN_TRUSTED_PROXIES ?=
export KILN_TRUSTED_PROXIES
UVICORN_PROXY_ARGS = $(if $(strip $(KILN_TRUSTED_PROXIES)),--proxy-headers --forwarded-allow-ips "$(KILN_TRUSTED_PROXIES)",--no-proxy-headers)
dev: $(VENV)/.installed services db prometheus-tools
	$(PY) manage.py seed_demo
	@echo "web http://127.0.0.1:$(PORT), worker, beat, Prometheus $$KILN_PROMETHEUS_URL (Ctrl-C stops all)"
	@rm -rf var/prometheus && mkdir -p var/prometheus
	@trap 'kill 0' INT TERM EXIT; \
	  PROMETHEUS_MULTIPROC_DIR=$(CURDIR)/var/prometheus \
	    $(PY) -m uvicorn kiln.asgi:application --host 127.0.0.1 --port $(PORT) --workers $(WEB_PROCESSES) \
	      --timeout-keep-alive 75 --timeout-graceful-shutdown 10 $(UVICORN_PROXY_ARGS) & \
	  $(VENV)/bin/celery -A kiln worker --loglevel INFO --concurrency 2 & \
	  $(VENV)/bin/celery -A kiln beat --loglevel INFO --schedule var/celerybeat-schedule & \
	  $(PY) manage.py audit_writer & \
	  $(PY) manage.py canary_dev_traffic --port $(DEV_TRAFFIC_PORT) & \
	  $(PY) manage.py canary_dev_prometheus --port $(DEV_PROMETHEUS_PORT) \
	    --target 127.0.0.1:$(DEV_TRAFFIC_PORT) --scrape-interval 5 --workdir var/dev-prometheus & \
	  wait

## db: create the DATABASE_URL database if missing, migrate it, make the audit roles
db: $(VENV)/.installed services
	@db=$${DATABASE_URL##*/}; db=$${db%%\?*}; \
	  psql "$${DATABASE_URL%/*}/postgres" -tAc "SELECT 1 FROM pg_database WHERE datname='$$db'" | grep -q 1 || \
	  { echo "creating database $$db"; psql "$${DATABASE_URL%/*}/postgres" -c "CREATE DATABASE \"$$db\"" >/dev/null; }
	$(PY) manage.py migrate --noinput
	$(PY) manage.py audit_setup_roles

## bench: rerun every benchmark (long: tens of minutes), one at a time under
## /tmp/kiln-bench.lock, each writing bench/results/<name>-<date>.json stamped with its
## command line, machine and date (kiln/benchjson.py). One alone: make bench-<name>. The
## commands are the bench app's (bench/management/commands/), which the development lock's
## venv loads and the image never has (docs/benchmarks.md#where-they-live).
BENCH_DATE ?= $(shell date -u +%Y-%m-%d)
BENCH_DIR ?= bench/results
TRACE ?= ../shared/data/google-2011
BENCH_audit_bench := audit_bench --events 100000 --json
BENCH_audit_choices_bench := audit_choices_bench
BENCH_audit_tlog_bench := audit_tlog_bench --entries 1000000 --json
BENCH_canary_bench := canary_bench --seeds report --rollouts 1000 --json
BENCH_canary_bench-tune := canary_bench --seeds tune --tune-rollouts 300 --json
BENCH_canary_promote_bench := canary_promote_bench --rollouts 1000 --json
# Real time: one 15 s tick per simulated minute against two live Prometheus servers.
BENCH_canary_prometheus_bench := canary_prometheus_bench --rollouts 5 --json
# The same over the kubernetes backend: the real client over HTTP to a local API server, with the
# client limits (KILN_KUBE_QPS / KILN_KUBE_BURST) it reports against.
BENCH_canary_promote_bench-kubernetes := canary_promote_bench --rollouts 1000 --kube-api local --json
BENCH_chaos_crash_bench := chaos_crash_bench --trials 200 --json
BENCH_chaos_lever_bench := chaos_lever_bench --runs 3 --json
BENCH_extender_bench := extender_bench --nodes 12477 --requests 2000 --json
BENCH_extender_bench-varied := extender_bench --nodes 12477 --requests 2000 --node-lists varied --json
BENCH_extender_bench-adaptive := extender_bench --nodes 12477 --requests 2000 --node-lists varied \
  --list-size adaptive --json
BENCH_scheduler_bench := scheduler_bench --nodes 5000 --requests 500
BENCH_scheduler_replay := scheduler_replay --trace $(TRACE) --parts 0-13 \
  --spot-fractions 0.1,0.3,0.5,0.7,0.9 --start trace,empty --schedulers kiln,default --seed 1 --workers 1
BENCH_cluster_bench := cluster_bench --nodes 1000 --pods 10000 --seed 2 --json
BENCH_cluster_bench-nocache := cluster_bench --nodes 1000 --pods 10000 --seed 2 \
  --node-cache-capable false --json
BENCH_provision_bench := provision_bench --requests 100 --concurrency 20 --json
# The web alone, with Kiln's ASGI handler and Django's own, alternated (docs/operations.md).
BENCH_web_bench := web_bench --rounds 5 --json
# The bench's 20 client threads each hold a connection of its process (provision_bench says so).
bench-provision_bench: export KILN_DB_POOL_MAX ?= 32
# The environment lifecycle (docs/portal.md): the worker SIGKILLed at every step, a demo of
# deferrals and forced disruptions, and the time from a gitops commit to synced.
BENCH_lifecycle_fault_matrix := lifecycle_fault_matrix --json
BENCH_lifecycle_demo := lifecycle_demo --environments 12 --seed 7 --port 9320 --json
BENCH_gitops_refresh_bench := gitops_refresh_bench --json
# Budgets and sleeping (docs/portal.md): a month of simulated use priced three ways.
BENCH_spend_month_demo := spend_month_demo --json
BENCHMARKS := audit_bench audit_choices_bench audit_tlog_bench canary_bench canary_bench-tune canary_promote_bench \
  canary_promote_bench-kubernetes canary_prometheus_bench \
  chaos_crash_bench chaos_lever_bench extender_bench extender_bench-varied extender_bench-adaptive scheduler_bench scheduler_replay \
  cluster_bench cluster_bench-nocache provision_bench web_bench lifecycle_fault_matrix lifecycle_demo gitops_refresh_bench spend_month_demo \
  schemathesis

bench: $(addprefix bench-,$(BENCHMARKS))

bench-%: $(VENV)/.installed db
	@test -n '$(BENCH_$*)' || { echo "no benchmark named $*" >&2; exit 2; }
	flock /tmp/kiln-bench.lock $(PY) -m kiln.benchjson $(BENCH_DIR)/$*-$(BENCH_DATE).json -- \
	  $(PY) manage.py $(BENCH_$*)

# The API fuzzing summary is written by the test module itself (tests/kiln/test_schemathesis.py).
bench-schemathesis: $(VENV)/.installed db
	flock /tmp/kiln-bench.lock env KILN_SCHEMATHESIS_SUMMARY=$(abspath $(BENCH_DIR))/schemathesis-$(BENCH_DATE).json \
	  $(PY) -m pytest -p no:cacheprovider -q tests/kiln/test_schemathesis.py

## loadtest: the production shape (web, worker, beat, audit writer, extender on ports
## LOADTEST_PORT and +1) under the locust mix over loopback HTTP, then the reconciliation;
## FAULT=worker|writer|web|extender|redis|postgres runs one fault (redis and postgres restart
## throwaway servers on LOADTEST_PORT+2 and +3, never the shared ones). Writes
## bench/results/loadtest[-FAULT]-<date>.json (docs/operations.md). THINK=0 is the stress mix
## (engineers never pause; written to loadtest-think0-<date>.json).
FAULT ?= none
THINK ?=
LOADTEST_PORT ?= 8130
loadtest: $(VENV)/.installed db
	flock /tmp/kiln-bench.lock $(PY) -m kiln.benchjson \
	  $(BENCH_DIR)/loadtest$(if $(filter-out none,$(FAULT)),-$(FAULT))$(if $(THINK),-think$(THINK))-$(BENCH_DATE).json -- \
	  $(PY) manage.py loadtest --fault $(FAULT) --port $(LOADTEST_PORT) $(if $(THINK),--think $(THINK)) --json

## screenshots: the browser walk (tests/e2e/test_walk.py) in the full Chromium, rewriting the
## README tour's pictures in docs/screenshots/
screenshots: $(VENV)/.installed services browser
	KILN_UPDATE_DOCS_SCREENSHOTS=1 KILN_E2E_BROWSER=/usr/bin/chromium $(PY) -m pytest -p no:cacheprovider -q tests/e2e/test_walk.py

## deploy-check: render every overlay of deploy/ (kubectl kustomize), then tests/deploy: each object
## strictly against Kubernetes 1.31 and 1.33 and the CRD schemas, cross-references, labels and
## images, the migration hook, docs/install.md's commands, the RBAC proof, promtool on the alert
## rules and on each process kind's /metrics (the suite runs them too)
KUBECTL ?= $(shell command -v kubectl || echo $(VENV)/bin/kubectl)
deploy-check: $(VENV)/.installed services prometheus-tools
	@for overlay in deploy/overlays/*/; do \
	  echo "kubectl kustomize $$overlay"; $(KUBECTL) kustomize "$$overlay" > /dev/null || exit 1; done
	$(PY) -m pytest -p no:cacheprovider -q tests/deploy tests/scheduler/test_deploy_config.py \
	  tests/kiln/test_metrics_exposition.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

## lock: re-pin both locks, with hashes, in a scratch venv: requirements.lock from
## requirements.in (runtime), then requirements-dev.lock from requirements-dev.in (runtime plus
## development, constrained to the runtime lock's versions). A pin already in a lock is kept
## while it still satisfies the .in file; `make lock UPGRADE=1` re-resolves to the newest.
PIP_COMPILE_FLAGS := --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
  --no-emit-find-links $(if $(UPGRADE),--upgrade)
lock:
	rm -rf /tmp/kiln-lock && $(PYTHON) -m venv /tmp/kiln-lock
	/tmp/kiln-lock/bin/pip install --quiet "$$(grep -oE '^pip-tools==[^ ]+' requirements-dev.lock)"
	/tmp/kiln-lock/bin/pip-compile $(PIP_COMPILE_FLAGS) --output-file requirements.lock requirements.in
	/tmp/kiln-lock/bin/pip-compile $(PIP_COMPILE_FLAGS) --output-file requirements-dev.lock requirements-dev.in

clean:
	rm -rf $(VENV) var
