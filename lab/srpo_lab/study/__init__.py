"""The study harness: settings x methods x seeds (optionally in blocks, crossed with levels),
each cell one training run with the same budget; resumable; tables with intervals and paired
tests. A study's own analysis lives with its spec under studies/<name>/.

    python benchmarks/study.py studies/cpu_onpolicy/cpu_main.yaml [--quick] [--max-minutes 110]
"""

from srpo_lab.study.runner import Cell, plan_cells, run_cell, run_study
from srpo_lab.study.spec import StudySpec, load_spec, parse_spec

__all__ = ["Cell", "StudySpec", "load_spec", "parse_spec", "plan_cells", "run_cell", "run_study"]
