"""The studies' own analyses live outside the package, in studies/<name>/ at the repository
root; their tests import them as `studies.<name>.<module>`, so the root goes on sys.path."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
