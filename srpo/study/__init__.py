"""Studies: methods x settings x seeds with equal budgets, resumable, with tables and plots.

    python benchmarks/study.py benchmarks/studies/cpu_main.yaml [--quick] [--max-minutes 110]
"""

from srpo.study.runner import Cell, plan_cells, run_cell, run_study
from srpo.study.spec import StudySpec, load_spec, parse_spec

__all__ = ["Cell", "StudySpec", "load_spec", "parse_spec", "plan_cells", "run_cell", "run_study"]
