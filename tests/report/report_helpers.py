"""One real smoke run for the report tests, made once per test session.

`srpo train` runs as a subprocess with stdout and stderr going to files (not a terminal), so the
same run also gives the non-interactive log the progress test reads. The mixed workflow (single,
parallel, routed) makes active sets of several sizes; 2 epochs x 2 minibatches make the update
off-policy, so sets get non-zero log-ratios and some are clipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "srpo" / "presets" / "smoke.yaml"
STEPS = 3
OVERRIDES = [
    f"train.steps={STEPS}", "train.threads=1", "workflow.name=mixed", "workflow.params={}",
    "train.epochs=2", "train.minibatches=2", "train.lr=0.01",
    "checkpoint.export=false", "checkpoint.plots=false",
]


@dataclass(frozen=True)
class SmokeRun:
    run_dir: Path
    stdout: str
    stderr: str

    def train_rows(self) -> list[dict]:
        rows = [json.loads(x) for x in (self.run_dir / "metrics.jsonl").read_text().splitlines()]
        return [r for r in rows if "loss" in r]


_CACHE: dict[str, SmokeRun] = {}


def make_smoke_run(tmp_path_factory) -> SmokeRun:
    """The run, made on first use (each test module asks for it through its own fixture)."""
    if "run" not in _CACHE:
        root = tmp_path_factory.mktemp("report-run")
        run_dir = root / "smoke-mixed"
        env = {k: v for k, v in os.environ.items() if k != "SRPO_PROGRESS"}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        with open(root / "stdout.log", "w") as out, open(root / "stderr.log", "w") as err:
            code = subprocess.run([sys.executable, "-m", "srpo.cli", "train", str(SMOKE),
                                   f"output_dir={run_dir}", *OVERRIDES],
                                  stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=root,
                                  check=False).returncode
        stdout, stderr = (root / "stdout.log").read_text(), (root / "stderr.log").read_text()
        assert code == 0, f"srpo train failed ({code}):\n{stdout[-2000:]}\n{stderr[-3000:]}"
        _CACHE["run"] = SmokeRun(run_dir, stdout, stderr)
    return _CACHE["run"]


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    """The system Chromium (scripts/setup.sh installs it; SRPO_CHROMIUM names another). Missing:
    the test fails, saying so; it never skips."""
    path = os.environ.get("SRPO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        pytest.fail(f"the report's browser tests need Chromium, not found at {path}: run scripts/setup.sh "
                    "(it runs `apt-get install -y chromium`) or set SRPO_CHROMIUM to a Chromium binary")
    return path


@contextlib.contextmanager
def open_report(html: Path) -> Iterator:
    """A Playwright page showing `html`, ready; page.errors (console errors and warnings, page
    errors) and page.requests (anything not read from disk) are collected while it is open."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the report's browser tests need the playwright package: pip install -e '.[dev]'")
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "blob:")) else requests.append(r.url))
        page.goto(html.as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        page.errors, page.requests = errors, requests
        try:
            yield page
        finally:
            browser.close()
