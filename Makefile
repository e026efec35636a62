# make demo  -- set up a virtualenv and run the story of a few tasks on an embedded Redis
# make test  -- the test suite (starts its own redis-server processes)
# make test-oldest -- the suite on the oldest supported corner: Python 3.10 (else 3.11) + Django 5.2 + django-tasks
#                    (without the Cluster and Sentinel suites, which make test runs)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev

OLDEST_VENV ?= .venv-oldest
OLDEST_STAMP := $(OLDEST_VENV)/.installed-dev

.PHONY: demo test test-oldest lint type bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || { PYBIN=$$(sh .ci/find-python) || exit 1; "$$PYBIN" -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

$(OLDEST_STAMP): pyproject.toml
	@test -x $(OLDEST_VENV)/bin/python || { PYBIN=$$(sh .ci/find-python 3.10 2>/dev/null || sh .ci/find-python 3.11) || exit 1; "$$PYBIN" -m venv $(OLDEST_VENV); }
	$(OLDEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(OLDEST_VENV)/bin/python -m pip install -q -e ".[dev,django52]" "Django>=5.2,<6.0"
	@touch $(OLDEST_STAMP)

demo: $(STAMP)
	cd example_project && ../$(PY) manage.py demo

test: $(STAMP)
	$(PY) -m pytest

# the topology suites (a 6-node Redis Cluster, a sentinel setup) test servers, not the Python and Django
# corner: they run once, in `make test`, which keeps CI within its 30 minutes
test-oldest: $(OLDEST_STAMP)
	$(OLDEST_VENV)/bin/python -m pytest -m "not cluster and not sentinel"

lint: $(STAMP)
	$(VENV)/bin/ruff check django_redisq tests example_project $(wildcard bench)

type: $(STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) .pytest_cache build dist *.egg-info
