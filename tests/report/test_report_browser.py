"""The report of a smoke run in a real headless Chromium (the system's, driven by Playwright):
it loads with no console error and no request, shows the run's steps, episodes and active sets
of each size, its filters change what is shown, and a screenshot of the episode browser is saved.

Chromium comes from the system packages (scripts/setup.sh installs it); SRPO_CHROMIUM names
another binary. Without it this test fails, saying so: it never skips.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pytest
from report_helpers import STEPS, SmokeRun, make_smoke_run, open_report


@pytest.fixture(scope="module")
def page(smoke_run):
    with open_report(smoke_run.run_dir / "report.html") as pg:
        yield pg


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> SmokeRun:
    return make_smoke_run(tmp_path_factory)


def _counts(page) -> tuple[int, dict[int, int]]:
    c = page.locator("#ep-counts")
    return int(c.get_attribute("data-episodes")), {
        int(k): v for k, v in json.loads(c.get_attribute("data-sets")).items()
    }


def _rows(page) -> list[list[str]]:
    return [r.split("\t") for r in page.locator("#ep-list tbody tr").all_inner_texts()]


def test_report_loads_with_no_error_and_no_request(page):
    assert page.errors == [] and page.requests == []
    assert page.locator("#charts .js-plotly-plot").count() >= 5  # the default panels are drawn


def test_the_share_of_invalid_routes_is_charted(page, smoke_run):
    # the smoke run's mixed workflow draws routed episodes; their invalid-route share is a curve
    group = "#charts [data-group='workflow counts (invalid routes, ...)']"
    names = page.locator(group).evaluate("d => d.data.map((t) => t.name)")
    assert "rollout/episode/route_invalid" in names
    key = "rollout/episode/route_invalid"
    logged = [r[key] for r in smoke_run.train_rows() if key in r]
    ys = page.locator(group).evaluate(
        "d => d.data.find((t) => t.name === 'rollout/episode/route_invalid').y.filter((v) => v !== null)")
    assert logged and ys == pytest.approx(logged)


def test_steps_episodes_and_sets_by_size_match_the_run(page, smoke_run):
    rows = smoke_run.train_rows()
    steps = page.locator("#f-step option").evaluate_all("os => os.map(o => o.value)")
    assert steps == [""] + [str(r["step"]) for r in rows]  # "all steps", then each step
    total_sets: Counter = Counter()
    for r in rows:
        page.select_option("#f-step", str(r["step"]))
        episodes, sets = _counts(page)
        assert episodes == r["rollout/episodes"] == len(_rows(page))
        assert sets == {k: int(r[f"sets/k{k}/count"]) for k in sets} and sum(sets.values()) == r["sets/all/count"]
        total_sets.update(sets)
    page.select_option("#f-step", "")
    assert _counts(page) == (sum(r["rollout/episodes"] for r in rows), dict(total_sets))
    assert len(total_sets) >= 2  # the mixed workflow gives sets of several sizes


def test_filters_change_what_is_shown(page, smoke_run, tmp_path):
    page.click("#f-reset")
    total, _ = _counts(page)
    sizes = page.locator("#f-size option").evaluate_all("os => os.map(o => o.value).filter(v => v)")
    big = max(sizes, key=int)
    page.select_option("#f-size", big)
    n, _ = _counts(page)
    assert 0 < n < total and all(big in row[4].split("-") for row in _rows(page))
    assert page.locator("#ep-detail .transition.match").count() >= 1  # the matching sets are marked
    page.click("#f-reset")
    page.select_option("#f-agent", "router")  # only routed episodes have a router
    assert {row[2] for row in _rows(page)} == {"routed"}
    page.click("#f-reset")
    rewards = sorted(float(row[3]) for row in _rows(page))
    page.fill("#f-rmin", str(rewards[-1]))
    n, _ = _counts(page)
    assert 0 < n < total and all(float(row[3]) >= rewards[-1] for row in _rows(page))
    page.click("#f-reset")
    assert _counts(page)[0] == total

    # an episode: its transitions in order, each set's members with their agents
    page.select_option("#f-step", str(STEPS))
    page.locator("#ep-list tbody tr").nth(1).click()
    step, index = (int(x) for x in _rows(page)[1][:2])
    from srpo.record import episodes_log

    ep = next(
        e for e in episodes_log.read_records(episodes_log.step_file(smoke_run.run_dir, step)) if e["index"] == index
    )
    shown = page.locator("#ep-detail .transition")
    assert shown.count() == len(ep["transitions"])
    for i, t in enumerate(ep["transitions"]):
        agents = shown.nth(i).locator(".member").evaluate_all("ms => ms.map(m => m.dataset.agent)")
        assert agents == [m["agent"] for m in t["members"]]
    page.locator("#ep-detail details summary", has_text="prompt").first.click()
    assert page.locator("#ep-detail details[open] pre").first.inner_text().startswith("<|im_start|>")

    # the screenshot of the episode browser (SRPO_REPORT_SCREENSHOT=PATH also keeps it there)
    shot = tmp_path / "report-episodes.png"
    page.locator("#episodes").screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("SRPO_REPORT_SCREENSHOT"):
        shutil.copy(shot, os.environ["SRPO_REPORT_SCREENSHOT"])


def test_curves_are_selectable_and_the_evaluation_diff_lists_every_problem(page, smoke_run):
    charts = page.locator("#charts .chart")
    before = charts.count()
    page.locator("#curve-picker label", has_text="grad norm per policy").locator("input").uncheck()
    assert charts.count() == before - 1
    page.locator("#curve-picker label", has_text="sets by size").locator("input").check()
    assert charts.count() == before and page.locator("#charts [data-group='sets by size'].js-plotly-plot").count() == 1
    page.select_option("#d-filter", "all")
    result = json.loads((smoke_run.run_dir / "eval" / "after.json").read_text())
    assert page.locator("#diff tbody tr").count() == result["n"]
    assert "McNemar" in page.locator("[data-testid=paired]").inner_text()
