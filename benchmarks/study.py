"""Run a study from a YAML spec: settings x methods x seeds with equal budgets, resumable.

    python benchmarks/study.py benchmarks/studies/cpu_main.yaml --quick        # smoke, < 15 min
    python benchmarks/study.py benchmarks/studies/cpu_main.yaml --max-minutes 110   # one chunk
    python benchmarks/study.py benchmarks/studies/cpu_main.yaml --list         # what is done

Rerunning the same command resumes where it stopped. See docs/results.md.
"""

import sys

from srpo.study.cli import main

if __name__ == "__main__":
    sys.exit(main())
