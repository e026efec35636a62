# make demo  -- set up a virtualenv and run the story of a few tasks on an embedded Redis
# make test  -- the test suite (starts its own redis-server processes)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint type bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || { PYBIN=$$(sh .ci/find-python) || exit 1; "$$PYBIN" -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

demo: $(STAMP)
	cd example_project && ../$(PY) manage.py demo

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check django_redisq tests example_project $(wildcard bench)

type: $(STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
