"""`from srpo import SRPOTrainer` works, and `import srpo` still loads no trainer: the root
package imports srpo.api only inside its module __getattr__ (tests/unit/test_layers.py leaves
that one lazy edge out of the import graph because of it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import srpo
import srpo.api

ROOT_INIT = Path(srpo.__file__)


def test_the_root_package_exports_the_api():
    from srpo import SRPOConfig, SRPOTrainer, TrainResult

    assert (SRPOConfig, SRPOTrainer, TrainResult) == (srpo.api.SRPOConfig, srpo.api.SRPOTrainer,
                                                      srpo.api.TrainResult)
    assert {"SRPOConfig", "SRPOTrainer"} <= set(srpo.__all__) and "SRPOTrainer" in dir(srpo)


def test_an_unknown_attribute_is_still_an_attribute_error():
    try:
        srpo.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "no attribute 'NoSuchThing'" in str(e)
    else:
        raise AssertionError("srpo.NoSuchThing did not raise")


def test_import_srpo_loads_no_api():
    code = "import sys, srpo, srpo.types; print('srpo.api' in sys.modules, 'srpo.train.trainer' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_root_imports_the_api_only_inside_getattr():
    tree = ast.parse(ROOT_INIT.read_text())
    inside = {id(node) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and fn.name == "__getattr__"
              for node in ast.walk(fn)}
    api_imports = [node for node in ast.walk(tree)
                   if isinstance(node, ast.Import) and any(a.name.startswith("srpo.api") for a in node.names)
                   or isinstance(node, ast.ImportFrom) and (node.module or "").startswith("srpo.api")]
    assert api_imports, "the root package re-exports srpo.api"
    assert all(id(node) in inside for node in api_imports)
