import random

import pytest

from django_redisq.backoff import compute_backoff


def test_exponential_then_capped():
    no_jitter = [compute_backoff(n, base=1, cap=10, jitter=0) for n in range(1, 7)]
    assert no_jitter == [1000, 2000, 4000, 8000, 10000, 10000]


def test_jitter_only_shortens_within_bounds():
    rng = random.Random(7)
    for n in range(1, 30):
        d = compute_backoff(n, base=0.5, cap=60, jitter=0.25, rand=rng)
        full = min(60, 0.5 * 2 ** (n - 1)) * 1000
        assert 0.75 * full - 1 <= d <= full


def test_huge_attempt_numbers_do_not_overflow():
    assert compute_backoff(10_000, base=1, cap=300, jitter=0) == 300_000


def test_rejects_zero():
    with pytest.raises(ValueError):
        compute_backoff(0)
