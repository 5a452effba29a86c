"""Run a study from a YAML spec: settings x methods x seeds with equal budgets, resumable.

    python benchmarks/study.py studies/cpu_onpolicy/cpu_main.yaml --quick        # smoke, < 15 min
    python benchmarks/study.py studies/cpu_onpolicy/cpu_main.yaml --max-minutes 110   # one chunk
    python benchmarks/study.py studies/cpu_onpolicy/cpu_main.yaml --list         # what is done
    python benchmarks/study.py studies/testbed_mechanism/spec.yaml --jobs 2      # a series study

Rerunning the same command resumes where it stopped. The studies: studies/README.md.
"""

import sys

from srpo_lab.study.cli import main

if __name__ == "__main__":
    sys.exit(main())
