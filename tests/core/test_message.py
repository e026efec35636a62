import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_redisq.core.message import Message, decode, encode, encode_arguments, encode_call
from django_redisq.exceptions import BadMessage, InvalidArguments, UnknownSchema


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


# -- the scalar fast path of encode_arguments ---------------------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))


def _outcome(args, kwargs, limit):  # type: ignore[no-untyped-def]
    try:
        a, k, size = encode_arguments(args, kwargs, limit)
    except InvalidArguments as exc:
        return ("refused", str(exc).split(":")[0])
    return ("ok", [(type(x), x) for x in a], {n: (type(v), v) for n, v in k.items()}, size)


@given(st.lists(SCALARS, max_size=6), st.dictionaries(st.text(max_size=8), SCALARS, max_size=4), st.integers(1, 400))
def test_scalars_take_the_fast_path_with_the_general_paths_answers(args, kwargs, limit):
    """A plain list/dict of scalars skips normalising and decoding back; an iterator takes the general path."""
    fast = _outcome(args, kwargs, limit)
    general = _outcome(iter(args), kwargs.items(), limit)  # not a list/tuple and dict: the general path
    if fast[0] == "ok" or general[0] == "ok":
        assert fast == general
    else:
        assert fast[0] == general[0] == "refused"


def test_the_fast_path_refuses_what_the_general_path_refuses():
    for bad in (["\udcff"], [float("nan")], [float("inf")], ["x" * 500]):
        with pytest.raises(InvalidArguments):
            encode_arguments(bad, {}, 100)
    assert encode_arguments((1, "a", None, True, 2.5), {"k": -1}, 1000)[:2] == ([1, "a", None, True, 2.5], {"k": -1})


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text())


@given(args=st.lists(scalars, max_size=5), kwargs=st.dictionaries(st.text(), scalars, max_size=5), slack=st.integers(-3, 3))
def test_encode_call_bounds_the_arguments_as_encode_arguments_does(args, kwargs, slack):
    """The one-encoding path (scalars) refuses exactly what the general one refuses, and its message is the same."""
    try:
        _, _, size = encode_arguments(args, kwargs, 1 << 30)
    except InvalidArguments:  # a lone surrogate: both refuse
        with pytest.raises(InvalidArguments):
            encode_call(args, kwargs, 1 << 30)
        return
    limit = max(0, size + slack)
    if size > limit:
        with pytest.raises(InvalidArguments, match=f"{size} bytes"):
            encode_call(args, kwargs, limit)
    else:
        got_args, got_kwargs, msg = encode_call(tuple(args), kwargs, limit)
        assert (got_args, got_kwargs, msg) == (args, kwargs, encode(args, kwargs))
