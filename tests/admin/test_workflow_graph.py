"""The workflow page's picture: inline SVG drawn on the server (admin/graph.py), its steps, edges and colours by state.

A chord of 30 and a chain of 100 are drawn node by node (rows by depth); a
group of 150 is drawn as counts per layer. In headless Chromium at 800 px,
the page (picture and table) fits the window.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from django_redisq import chain, chord, group
from django_redisq.admin.graph import colour
from tests.admin.test_browser import shot
from tests.admin.test_layout import login
from tests.admin.test_site import fast_passwords  # noqa: F401 - the autouse fixture
from tests.helpers import run_in_thread
from tests.testapp import workflow_tasks as wt


def page_of(client, wf_id: str) -> str:
    return client.get(reverse("admin:django_redisq_deadletter_workflow", args=["default", wf_id])).content.decode()


def nodes(html: str) -> dict[int, str]:
    """index -> the fill of its box."""
    found = re.findall(r'<g class="redisq-node redisq-node-(\w+)" data-index="(\d+)">.*?fill="(#\w+)"', html)
    return {int(i): fill for _, i, fill in found}


@pytest.mark.django_db
def test_a_chord_of_30_is_drawn_with_every_step_edge_and_state(r, make_worker, admin_client):
    wf = chord([wt.add.s(i, i) for i in range(29)] + [wt.fails_unless.s("graph")], wt.total.s()).enqueue()
    for _ in range(4):
        run_in_thread(make_worker())
    html = page_of(admin_client, wf.id)
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="redisq-workflow-graph"' in html and "<script" not in html.split("<svg")[1]
    drawn = nodes(html)
    assert sorted(drawn) == list(range(31))  # 30 members and the callback
    assert html.count('class="redisq-edge"') == 30  # each member to the callback
    assert [drawn[i] for i in range(29)] == [colour("finished")] * 29
    assert drawn[29] == colour("dead") and drawn[30] == colour("waiting")
    assert colour("finished") != colour("dead") != colour("waiting")


@pytest.mark.django_db
def test_a_chain_of_100_is_drawn_by_depth_and_a_group_of_150_as_counts(r, admin_client):
    wf = chain(wt.add.s(0, 0), *[wt.add.s(1) for _ in range(99)]).enqueue()
    html = page_of(admin_client, wf.id)
    assert sorted(nodes(html)) == list(range(100)) and html.count('class="redisq-edge"') == 99
    ys = [float(y) for y in re.findall(r'data-index="\d+"><title>[^<]*</title><rect x="[\d.]+" y="([\d.]+)"', html)]
    assert len(set(ys)) == 100  # one row per depth: a chain goes straight down
    big = group([wt.add.s(i, i) for i in range(150)]).enqueue()
    html = page_of(admin_client, big.id)
    assert not nodes(html) and "150 steps, counted by depth" in html
    assert re.search(r"depth 0: 150 steps", html) and 'class="redisq-layer redisq-layer-not-done"' in html


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_workflow_page_fits_800_px(r, make_worker, page):
    wf = chord([wt.add.s(i, i) for i in range(29)] + [wt.fails_unless.s("graph-800")], wt.total.s()).enqueue()
    for _ in range(4):
        run_in_thread(make_worker())
    page.set_viewport_size({"width": 800, "height": 900})
    login(page)
    page.goto(reverse("admin:django_redisq_deadletter_workflow", args=["default", wf.id]))
    m = page.evaluate("""() => {
      const g = document.querySelector('#redisq-workflow-graph').getBoundingClientRect();
      const t = document.querySelector('#redisq-workflow-steps').closest('.redisq-scroll');
      return {over: document.documentElement.scrollWidth - document.documentElement.clientWidth, left: g.left, right: g.right,
              width: g.width, tableScrolls: t.scrollWidth - t.clientWidth, nodes: document.querySelectorAll('.redisq-node').length};
    }""")
    shot(page, "workflow-800")
    assert m["over"] <= 0, f"the page is {m['over']}px wider than the window"
    assert m["left"] >= 0 and m["right"] <= 800 and m["width"] > 300 and m["nodes"] == 31, m
    assert m["tableScrolls"] <= 1, m
