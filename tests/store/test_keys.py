import re
from pathlib import Path

from django_redisq.store.keys import QueueKeys

PKG = Path(__file__).resolve().parents[2] / "django_redisq"


def hash_slot_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: the first {...}."""
    m = re.search(r"\{([^}]+)\}", key)
    assert m, key
    return m.group(1)


def test_every_key_of_a_queue_shares_its_hash_tag():
    k = QueueKeys("emails")
    names = [k.pending, k.scheduled, k.dead, k.workers, k.cancels, k.processing("w"), k.worker_info("w"),
             k.task("id"), k.status("id"), k.idem("order-{1}"), k.counter("processed"), k.counter("failed", 5),
             k.paused, k.prioritized, k.prioseq, k.slots, k.blocked, k.rate, k.limits,
             k.task_slots("shop.tasks.report"), k.task_blocked("shop.tasks.report")]
    assert {hash_slot_tag(n) for n in names} == {"emails"}
    assert all(n.startswith(k.prefix) for n in names)


def test_prefix_is_configurable():
    assert QueueKeys("q", "shop").pending == "shop:{q}:pending"


def test_no_key_literal_outside_keys_py():
    """Key names are spelled only in store/keys.py (and built from the prefix inside Lua)."""
    for path in PKG.rglob("*.py"):
        if path.relative_to(PKG).as_posix() == "store/keys.py":
            continue
        text = path.read_text()
        assert "redisq:{" not in text and ':pending"' not in text and ":processing:" not in text, path


def test_only_the_storage_modules_run_scripts():
    # store/scripts/durable.py also holds the checks of DURABLE_REPLICAS, which settings/read.py runs: not a script
    pattern = r"from django_redisq\.store import scripts|django_redisq\.store\.scripts(?!\.durable\b| import durable\b)|from \.+ import scripts"
    importers = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if re.search(pattern, p.read_text())}
    assert "store/broker/broker.py" in importers and all(name.startswith("store/") for name in importers), importers
