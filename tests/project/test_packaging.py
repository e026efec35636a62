import re
from importlib import resources

import pytest
from django.core.management import call_command

from django_redisq.store import scripts


@pytest.mark.parametrize("name", scripts.NAMES)
def test_every_script_loads_and_declares_its_contract(name):
    text = scripts.source(name)
    header = text.split("\nlocal ", 1)[0]
    assert "KEYS[1]" in header and "ARGV[1]" in header and "Returns" in header, name


def test_every_lua_file_is_listed():
    files = {p.name[:-4] for p in resources.files("django_redisq.store.scripts").iterdir() if p.name.endswith(".lua")}
    assert files == set(scripts.NAMES)


def test_scripts_load_into_redis(r):
    for name in scripts.NAMES:
        assert re.fullmatch(r"[0-9a-f]{40}", r.script_load(scripts.source(name)))


def test_py_typed_is_shipped():
    assert resources.files("django_redisq").joinpath("py.typed").is_file()


@pytest.mark.django_db
def test_no_missing_migrations():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
