"""The real-browser fixtures (headless Chromium, a live server) for every browser test of the admin."""

from tests.admin.test_browser import live_server, page  # noqa: F401 - fixtures, found by pytest here
