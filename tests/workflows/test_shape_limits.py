"""What a workflow's shape must fit at creation (issue 36): its depth (workflows/canvas.py ``MAX_DEPTH``) and each step's fan-in
(workflows/limits.py: refused only when even the parents' smallest results cannot fit MAX_MESSAGE_BYTES)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from django_redisq import chain, chord, group
from django_redisq.workflows.canvas import MAX_DEPTH, InvalidWorkflow, compile_flow
from tests.testapp import workflow_tasks as wt


def nested(kind: Any, depth: int) -> Any:
    node = wt.add.s(0, 1)
    for i in range(depth):
        node = kind(wt.add.s(i, 1), node)
    return node


def alternating(depth: int) -> Any:
    node = wt.add.s(0, 1)
    for i in range(depth):
        node = (chain if i % 2 else group)(wt.add.s(i, 1), node)
    return node


def test_chains_in_chains_and_groups_in_groups_any_depth_are_written_inline():
    """Thousands deep raised RecursionError; a chain in a chain is the same as its parts inline."""
    steps = compile_flow(nested(chain, 5000))
    assert len(steps) == 5001 and steps[1].parents == [0] and steps[-1].parents == [4999]
    steps = compile_flow(nested(group, 5000))
    assert len(steps) == 5001 and all(not s.parents for s in steps)
    assert len(nested(chain, 5000).signatures()) == 5001


def test_a_canvas_deeper_than_the_limit_is_invalid_workflow_naming_it(r):
    with pytest.raises(InvalidWorkflow, match=f"at most {MAX_DEPTH} levels.*MAX_DEPTH"):
        alternating(3000).enqueue()  # RecursionError before
    with pytest.raises(InvalidWorkflow, match="MAX_DEPTH"):
        compile_flow(alternating(MAX_DEPTH + 1))
    assert len(compile_flow(alternating(MAX_DEPTH - 1))) == MAX_DEPTH
    assert r.keys("*wf:*") == []


def test_a_chord_whose_callback_cannot_fit_even_the_smallest_results_is_refused(r):
    options = copy.deepcopy(settings.TASKS)
    options["default"]["OPTIONS"]["MAX_MESSAGE_BYTES"] = 1000
    with override_settings(TASKS=options):
        with pytest.raises(InvalidWorkflow) as refused:
            chord([wt.add.s(i, 1) for i in range(600)], wt.total.s()).enqueue()
        text = str(refused.value)
        assert "600 steps" in text and "MAX_MESSAGE_BYTES (1,000)" in text and "RESULT_MAX_BYTES" in text
        assert "fewer members" in text and re.search(r"could be 629,14\d,\d{3}", text)  # the worst case: 1 MiB each
        assert r.keys("*wf:*") == [] and r.keys("*pending*") == []  # nothing stored, nothing queued
        chord([wt.add.s(i, 1) for i in range(300)], wt.total.s()).enqueue()  # fits at the smallest: the run decides
        chord([wt.add.s(i, 1) for i in range(600)], wt.add.si(1, 1)).enqueue()  # takes no results: fits


def test_ordinary_chains_and_chords_are_not_refused_by_the_defaults(r):
    """The worst case (parents x RESULT_MAX_BYTES, 1 MiB each) is over the default 512 KiB even for one parent."""
    chain(wt.add.s(1, 1), wt.double.s()).enqueue()
    chord([wt.add.s(i, 1) for i in range(1000)], wt.total.s()).enqueue()
