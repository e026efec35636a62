"""The pytest plugin of django-redisq: opt-in fixtures for a throwaway redis-server and a queue to drain.

Installed with the package (entry point ``pytest11``), it only adds an option
until a suite asks for it, with ``--redisq`` on the command line or
``redisq_fixtures = true`` in its pytest configuration (or by naming
``django_redisq.testing.fixtures`` in a conftest's ``pytest_plugins``): then the
fixtures of ``fixtures.py`` are registered. So a project that installs
django-redisq gets no fixture names it did not ask for. Loading it imports the
package (and so Django's and redis-py's modules, as ``import django_redisq``
does), but configures nothing and connects nowhere; ``-p no:django_redisq``
leaves it out altogether.
"""

from __future__ import annotations

from typing import Any

FIXTURES = "django_redisq.testing.fixtures"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("django-redisq")
    group.addoption("--redisq", action="store_true", default=None,
                    help="register django-redisq's fixtures (redisq_server, redisq_url, redisq_queue, redisq_captured)")
    parser.addini("redisq_fixtures", type="bool", default=False, help="register django-redisq's fixtures (as --redisq does)")


def pytest_configure(config: Any) -> None:
    wanted = config.getoption("redisq") or config.getini("redisq_fixtures")
    if wanted and not config.pluginmanager.has_plugin(FIXTURES):
        config.pluginmanager.import_plugin(FIXTURES)
