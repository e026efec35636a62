"""Tests of ``django_redisq.settings`` (reading and checking the settings).

Named ``conf``, not ``settings``: a package ``tests.settings`` would shadow the suite's Django settings module
(``tests/settings.py``, ``DJANGO_SETTINGS_MODULE``)."""
