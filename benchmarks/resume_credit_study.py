"""Resume the preregistered credit study (docs/results.md, "Credit in debate") from the commit its
cells run at, skipping every cell whose row is already committed.

The study's cells run from one commit (f033f37), checked out as a git worktree, so that a later
change to the library cannot reach a cell midway; a queue killed by a restart loses the runs
whose rows were not committed yet, and this runs only the cells missing from ROWS:

    git worktree add --detach /tmp/wt_credit f033f37
    PYTHONPATH=/tmp/wt_credit .venv/bin/python benchmarks/resume_credit_study.py \\
        --code /tmp/wt_credit --runs-dir /tmp/credit_runs \\
        --rows results/bench/debate_credit_2026-12-06/rows.json

Cells run seed-major, two side by side at one thread each (the study's setting). Commit rows
as they finish: `benchmarks/debate_credit.py analyze --runs-dir RUNS_DIR --with-rows ROWS --out
<folder>`, then copy rows.json / tests.json / table.md over the committed ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--code", required=True, type=Path, help="a checkout of the study's commit")
    p.add_argument("--runs-dir", required=True, type=Path)
    p.add_argument("--rows", required=True, type=Path, help="the committed rows.json")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--list", action="store_true", help="print the missing cells and stop")
    args = p.parse_args()
    # the study's own runner, from the study's commit (its ROOT is that checkout: runs import it)
    sys.path.insert(0, str(args.code.resolve() / "benchmarks"))
    import debate_credit as study

    done = {(r["arm"], r["task"], r["seed"]) for r in json.loads(args.rows.read_text())["rows"]}
    cells = [(arm, task, seed) for seed in range(5) for task in study.STUDY_TASKS
             for arm in study.STUDY_ARMS if (arm, task, seed) not in done]
    print(f"{len(cells)} cells to run", flush=True)
    if args.list:
        print("\n".join(study.run_name(*cell) for cell in cells))
        return
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(lambda cell: study.one(*cell, args.runs_dir), cells))


if __name__ == "__main__":
    main()
