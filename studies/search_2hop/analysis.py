"""The 2-hop search credit study's preregistered tests (docs/results.md, "2-hop search credit study").

    python -m studies.search_2hop.analysis [--spec studies/search_2hop/spec.yaml] [--out DIR]

The same tests as the 1-hop search credit study (studies/search_credit/analysis.py, whose
docstring defines them: C1 SRPO minus MAGRPO, C2 SRPO minus GRPO, paired t over seeds, Holm;
the secondary question-level sign-flip test; E3), on this study's spec, with E3's episode
means extended by what a 2-hop episode records: recall of the hop-1 and of the hop-2 document
(`recall_hop1`, `recall_hop2`) and the recall of round 1's retrieval alone (`first_step_recall`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from studies.search_credit import analysis as credit

DEFAULT_SPEC = Path("studies/search_2hop/spec.yaml")
HOP_METRICS = {"recall_hop1": "recall_hop1", "recall_hop2": "recall_hop2", "first_step_recall": "first_step_recall"}
TITLE = "2-hop search credit study"


def main(argv: Sequence[str] | None = None) -> int:
    return credit.main(argv, description=__doc__.splitlines()[0], default_spec=DEFAULT_SPEC,
                       metrics={**credit.EPISODE_METRICS, **HOP_METRICS}, title=TITLE,
                       extra_columns=list(HOP_METRICS.values()))


if __name__ == "__main__":
    raise SystemExit(main())
