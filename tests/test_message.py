import json

import pytest

from django_redisq.exceptions import BadMessage, InvalidArguments, UnknownSchema
from django_redisq.message import Message, decode, encode, encode_arguments


def test_round_trip():
    raw = encode([1, "x", [2]], {"k": {"n": None}})
    assert json.loads(raw) == {"v": 1, "args": [1, "x", [2]], "kwargs": {"k": {"n": None}}}
    assert decode(raw, "a.b", "default") == Message("a.b", [1, "x", [2]], {"k": {"n": None}}, "default")


def test_a_small_call_fits_a_compact_redis_hash():
    assert len(encode([12345], {}).encode()) <= 64  # hash-max-listpack-value


def test_fields_named_in_the_message_win():
    raw = json.dumps({"v": 1, "task": "x.y", "queue": "emails", "args": [], "kwargs": {}})
    assert decode(raw, "a.b", "default") == Message("x.y", [], {}, "emails")


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("{not json", BadMessage),
        (b"\xff\xfe", BadMessage),
        ("[1, 2]", BadMessage),
        ('"text"', BadMessage),
        ('{"v": 2, "task": "a"}', UnknownSchema),
        ('{"task": "a"}', UnknownSchema),
        ('{"v": 1}', BadMessage),
        ('{"v": 1, "task": null}', BadMessage),
        ('{"v": 1, "task": "a", "args": {}, "queue": "q"}', BadMessage),
        ('{"v": 1, "task": "a", "kwargs": [], "queue": "q"}', BadMessage),
        ('{"v": 1, "task": "a", "queue": 5}', BadMessage),
        ('{"v": 1, "task": "a", "queue": "q", "priority": "high"}', BadMessage),
    ],
)
def test_bad_messages_are_named(raw, error):
    with pytest.raises(error):
        decode(raw, "", "default")


def test_arguments_must_be_json():
    with pytest.raises(InvalidArguments, match="JSON values"):
        encode_arguments([object()], {}, 1000)
    with pytest.raises(InvalidArguments, match="str keys"):
        encode_arguments([{1: "a"}], {}, 1000)
    with pytest.raises(InvalidArguments):
        encode_arguments([float("nan")], {}, 1000)


def test_tuples_become_lists():
    args, kwargs, _ = encode_arguments((1, (2, 3)), {"a": (4,)}, 1000)
    assert args == [1, [2, 3]] and kwargs == {"a": [4]}


def test_size_limit_is_enforced_with_a_clear_error():
    with pytest.raises(InvalidArguments, match="limit is 100"):
        encode_arguments(["x" * 200], {}, 100)
