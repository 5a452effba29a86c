"""The 2-hop search credit study's preregistered tests (docs/results.md, "2-hop search credit study").

    python -m studies.search_2hop.analysis [--spec studies/search_2hop/spec.yaml] [--out DIR]

The same tests as the 1-hop search credit study (studies/search_credit/analysis.py, whose
docstring defines them: C1 SRPO minus MAGRPO, C2 SRPO minus GRPO, paired t over seeds, Holm;
the secondary question-level sign-flip test; E3), on this study's spec, with E3's episode
means extended by what a 2-hop episode records: recall of the hop-1 and of the hop-2 document
(`recall_hop1`, `recall_hop2`) and the recall of round 1's retrieval alone (`first_step_recall`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from srpo_lab.study.spec import load_spec
from studies.search_credit.analysis import EPISODE_METRICS, analyse, markdown

DEFAULT_SPEC = Path("studies/search_2hop/spec.yaml")
HOP_METRICS = {"recall_hop1": "recall_hop1", "recall_hop2": "recall_hop2", "first_step_recall": "first_step_recall"}
TITLE = "2-hop search credit study"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    p.add_argument("--out", type=Path, default=None, help="folder for analysis.md / .json (default: the spec's output)")
    args = p.parse_args(argv)
    a = analyse(args.spec, {**EPISODE_METRICS, **HOP_METRICS})
    text = markdown(a, TITLE, extra_columns=list(HOP_METRICS.values()))
    out = args.out or Path(load_spec(args.spec).output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.json").write_text(json.dumps(a, indent=1, default=str))
    (out / "analysis.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
