"""Size and opening time of `srpo report` for a run scaled up from a real short run.

    python benchmarks/bench_report_size.py RUN --steps 40 --eval-size 256 --out /some/dir

RUN is a real run (e.g. the default job with train.steps=2 eval.size=64): its per-step files
are real. The scaled run repeats its training rows and episode files over --steps steps
(renumbered) and its evaluation problems up to --eval-size (task ids suffixed), so the report
holds what a run of that length would hold, at the real per-step sizes. Prints the report's size
in bytes and, when Playwright and Chromium are there, the time until the page has drawn
everything (body[data-ready], since navigation start), the median of --repeat openings.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
from pathlib import Path

from srpo.record import episodes_log
from srpo.record.report import write_report


def scale_run(src: Path, dst: Path, steps: int, eval_size: int) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    shutil.copy(src / "config.yaml", dst / "config.yaml")
    rows = [json.loads(x) for x in (src / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "loss" in r]
    with open(dst / "metrics.jsonl", "w") as f:
        evals = [r for r in rows if "eval/accuracy" in r]
        f.write(json.dumps({**evals[0], "step": 0}) + "\n")
        f.writelines(json.dumps({**train[(s - 1) % len(train)], "step": s}) + "\n" for s in range(1, steps + 1))
        f.write(json.dumps({**evals[-1], "step": steps}) + "\n")
    files = episodes_log.step_files(src)
    for s in range(1, steps + 1):
        recs = episodes_log.read_records(files[(s - 1) % len(files)][0])
        episodes_log.write_records(episodes_log.step_file(dst, s), [{**r, "step": s} for r in recs])
    (dst / "eval").mkdir()
    for label in ("before", "after"):
        res = json.loads((src / "eval" / f"{label}.json").read_text())
        eps = episodes_log.read_records(src / "eval" / f"{label}.episodes.jsonl.gz")
        reps = -(-eval_size // res["n"])
        ids = [f"{t}#{k}" for k in range(reps) for t in res["task_ids"]][:eval_size]
        res.update(n=len(ids), task_ids=ids, correct=(res["correct"] * reps)[:eval_size])
        (dst / "eval" / f"{label}.json").write_text(json.dumps(res))
        scaled = [{**e, "task_id": f"{e['task_id']}#{k}"} for k in range(reps) for e in eps][:eval_size]
        episodes_log.write_records(dst / "eval" / f"{label}.episodes.jsonl.gz", scaled)
    return dst


def open_seconds(html: Path, repeat: int) -> list[float] | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).is_file():
        return None
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(html.as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            out.append(int(page.get_attribute("body", "data-ready-ms")) / 1000)
            page.close()
        browser.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-size", type=int, default=256)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    run = scale_run(a.run, a.out / f"scaled-{a.steps}", a.steps, a.eval_size)
    html = write_report(run)
    gz = sum(p.stat().st_size for p, _ in episodes_log.step_files(run))
    raw = 0
    for p, _ in episodes_log.step_files(run):
        with gzip.open(p) as f:
            raw += len(f.read())
    print(f"{a.steps} steps, {a.eval_size} eval problems: report {html.stat().st_size:,} bytes; "
          f"episodes {gz:,} bytes gzip ({raw:,} as JSON)")
    times = open_seconds(html, a.repeat)
    if times:
        print(f"opened (all panels drawn) in {statistics.median(times):.2f} s median of {times}")


if __name__ == "__main__":
    main()
