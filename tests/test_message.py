import json

import pytest

from django_redisq.exceptions import BadMessage, InvalidArguments, UnknownSchema
from django_redisq.message import Message, decode, encode_arguments


def test_round_trip():
    m = Message("a.b", [1, "x", [2]], {"k": {"n": None}}, "default")
    assert decode(m.encode()) == m
    assert json.loads(m.encode())["v"] == 1


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
        ('{"v": 1, "task": "a", "args": {}, "queue": "q"}', BadMessage),
        ('{"v": 1, "task": "a", "kwargs": [], "queue": "q"}', BadMessage),
        ('{"v": 1, "task": "a", "queue": 5}', BadMessage),
        ('{"v": 1, "task": "a", "queue": "q", "priority": "high"}', BadMessage),
    ],
)
def test_bad_messages_are_named(raw, error):
    with pytest.raises(error):
        decode(raw)


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
