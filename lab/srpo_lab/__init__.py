"""srpo's research harness, for this repository's own use (installed editable by scripts/setup.sh,
never shipped with the srpo package): the study runner (`srpo_lab.study`: settings x methods x
seeds, resumable, tables with intervals and paired tests) and the statistics over runs and seeds
(`srpo_lab.stats`). Studies' specs and analyses live in studies/, measurement scripts in
benchmarks/. It imports srpo; srpo never imports it (tests/unit/test_layers.py)."""
