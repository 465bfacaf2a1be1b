# Kiln. `make run` (standalone) and `make test` are the two set-up commands; see README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000

# The test and dev targets talk to real PostgreSQL and Redis.
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/kiln
export REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: run test dev lint services browser lock clean

# Outside standalone SECRET_KEY is required; these two local targets use a throwaway one.
test dev: export SECRET_KEY ?= insecure-local-test-and-dev-key-never-used-in-production
dev: export KILN_SECURE_COOKIES ?= 0

$(VENV)/.installed: requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	touch $@

## run: standalone mode on http://127.0.0.1:$(PORT) (SQLite, in-process worker, simulated cluster)
run: $(VENV)/.installed
	env -u DATABASE_URL -u REDIS_URL $(PY) manage.py standalone --port $(PORT)

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

## browser: headless Chromium for the end-to-end tests (Debian package)
browser:
	@test -x /usr/bin/chromium || { \
	  echo "installing chromium from Debian packages"; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

## test: the whole suite against PostgreSQL and Redis
test: $(VENV)/.installed services browser
	$(PY) manage.py audit_setup_roles
	$(PY) -m pytest -p no:cacheprovider

## dev: the production shape - web, worker, beat and audit writer as separate processes
dev: $(VENV)/.installed services
	@db=$${DATABASE_URL##*/}; db=$${db%%\?*}; \
	  psql "$${DATABASE_URL%/*}/postgres" -tAc "SELECT 1 FROM pg_database WHERE datname='$$db'" | grep -q 1 || \
	  { echo "creating database $$db"; psql "$${DATABASE_URL%/*}/postgres" -c "CREATE DATABASE \"$$db\"" >/dev/null; }
	$(PY) manage.py migrate --noinput
	$(PY) manage.py audit_setup_roles
	$(PY) manage.py seed_demo
	@echo "web http://127.0.0.1:$(PORT), worker, beat (Ctrl-C stops all)"
	@trap 'kill 0' INT TERM EXIT; \
	  $(PY) -m uvicorn kiln.asgi:application --host 127.0.0.1 --port $(PORT) & \
	  $(VENV)/bin/celery -A kiln worker --loglevel INFO --concurrency 2 & \
	  $(VENV)/bin/celery -A kiln beat --loglevel INFO --schedule var/celerybeat-schedule & \
	  $(PY) manage.py audit_writer & \
	  wait

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

## lock: re-pin requirements.lock from requirements.in in a scratch venv
lock:
	rm -rf /tmp/kiln-lock && $(PYTHON) -m venv /tmp/kiln-lock
	/tmp/kiln-lock/bin/pip install --quiet -r requirements.in
	{ echo "# Generated from requirements.in; Python 3.11. Regenerate: make lock"; /tmp/kiln-lock/bin/pip freeze; } > requirements.lock

clean:
	rm -rf $(VENV) var
