"""The offline GPU smoke bundle (scripts/gpu_bundle.py, docs/gpu.md section 5), tested without
the network: the wheels come from the bundle cache (.cache/gpu-bundle/), filled once on a
connected machine by

    .venv/bin/python scripts/gpu_bundle.py                              # the 3.12 (GPU) wheels
    .venv/bin/python scripts/gpu_bundle.py --target local --image-wheels   # this Python's + the image's

Tests whose wheels are not cached are skipped, saying which command fills the cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
gb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gb)
CACHE = ROOT / ".cache" / "gpu-bundle"


def _cached(sub: str, target: str) -> bool:
    return all(gb.cached_wheel(CACHE / sub, n, v, target) for n, v in gb.BUNDLE_WHEELS)


@pytest.mark.parametrize(("name", "ok"), [
    ("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", True),
    ("pystemmer-3.1.0-cp312-cp312-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl", True),
    ("tokenizers-0.23.3-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
    ("bm25s-0.3.16-py3-none-any.whl", True),
    ("shellingham-1.5.4-py2.py3-none-any.whl", True),
    ("pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", False),
    ("pydantic_core-2.50.5-cp312-cp312-macosx_11_0_arm64.whl", False),
    ("pydantic_core-2.50.5-cp312-cp312-manylinux_2_34_x86_64.whl", False),
    ("pydantic_core-2.50.5-cp312-cp312-manylinux2014_aarch64.whl", False),
    ("pydantic_core-2.50.5-cp312-cp312-musllinux_1_1_x86_64.whl", False),
    ("foo-1.0-py2-none-any.whl", False),
])
def test_gpu_tags(name, ok):
    assert (gb.tag_problem(Path(name), "gpu") is None) == ok


@pytest.mark.skipif(not _cached("gpu", "gpu"), reason="3.12 wheels not cached: run "
                    "`.venv/bin/python scripts/gpu_bundle.py` once on a connected machine")
def test_the_gpu_bundle_builds_offline_and_resolves_for_python_312(tmp_path, capsys):
    out = tmp_path / "bundle"
    gb.main(["--offline", "--out", str(out), "--with-tree"])
    built = capsys.readouterr().out
    assert "MiB in all" in built
    names = {p.name for p in (out / "wheels").glob("*.whl")}
    assert any(n.startswith("srpo-0.1.0-py3-none-any") for n in names)
    assert {"install_and_smoke.sh", "gpu_smoke.py", "requirements.txt", "MANIFEST.json"} <= {
        p.name for p in out.iterdir()}
    assert gb.dir_bytes(out) < 16 * 2**20  # far under the 64 MiB limit
    gb.main(["--check", "--out", str(out)])
    checked = capsys.readouterr().out
    assert "check passed" in checked and "from ??" not in checked
    for name in ("srpo", "pydantic", "pydantic_core", "math_verify", "bm25s", "pystemmer"):
        assert f"  {name}==" in checked and "from bundle" in checked.split(f"  {name}==")[1].splitlines()[0]
    assert "torch==2.11.0  from image (stub)" in checked


def test_a_bundle_over_the_limit_is_refused(tmp_path):
    if not _cached("gpu", "gpu"):
        pytest.skip("3.12 wheels not cached (see the module doc)")
    with pytest.raises(SystemExit, match="over the 1.0 MiB limit"):
        gb.main(["--offline", "--out", str(tmp_path / "b"), "--limit-mib", "1"])
    assert not (tmp_path / "b").exists()


def _image_wheels() -> Path:
    return CACHE / f"image-{gb.local_tag()}"


@pytest.mark.slow
@pytest.mark.skipif(not (_cached(f"local-{gb.local_tag()}", "local")
                         and any(_image_wheels().glob("image-*.ok"))),
                    reason="local wheels not cached: run `.venv/bin/python scripts/gpu_bundle.py "
                           "--target local --image-wheels` once on a connected machine")
def test_the_local_bundle_installs_offline_into_an_image_like_venv_and_the_smoke_passes_on_cpu(tmp_path):
    """A clean venv with only what the GPU image holds (CPU torch 2.13.0 for its CUDA torch;
    transformers, peft, accelerate, safetensors, tokenizers, pytest, rich, tqdm; without
    pydantic), the local bundle installed by its own install_and_smoke.sh with --no-index, and
    the smoke run on CPU: every check passes, srpo is imported from the venv, not this checkout."""
    bundle = tmp_path / "bundle"
    gb.main(["--target", "local", "--offline", "--out", str(bundle)])
    image = tmp_path / "image"
    env = {**os.environ, "PIP_NO_INDEX": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    subprocess.run([sys.executable, "-m", "venv", str(image)], check=True)
    py = str(image / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(_image_wheels()),
                    *[f"{n}=={v}" for n, v in gb.IMAGE_LOCAL]], check=True, env=env)
    subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", *gb.IMAGE_LOCAL_REMOVE], check=True, env=env)
    gone = subprocess.run([py, "-c", "import pydantic"], check=False, capture_output=True, env=env)
    assert gone.returncode != 0  # as in the image: the bundle must bring it
    out = tmp_path / "out"
    run_env = {**env, "PYTHON": py, "SMOKE_VENV": str(tmp_path / "venv"), "OUT": str(out),
               "SMOKE_DEVICE": "cpu"}
    proc = subprocess.run(["bash", str(bundle / "install_and_smoke.sh")], check=False, capture_output=True,
                          text=True, env=run_env, cwd=tmp_path, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("smoke:")]
    print("\n".join(lines))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "smoke.json").read_text())
    assert result["passed"] and result["finished"]
    checks = {c["check"]: c for c in result["checks"]}
    assert set(checks) >= {"env", "tiny", "init-0.5b", "math-0.5b", "resume-0.5b", "search-0.5b",
                           "eval", "report"}
    assert str(tmp_path / "venv") in checks["env"]["srpo_at"]
    assert checks["env"]["entry_points"] == "math,search,testbed"
    assert checks["math-0.5b"]["gen_tok_s"] > 0
    # $OUT holds the three result files (and the installer's two); the runs come back archived
    assert {p.name for p in out.iterdir()} == {"smoke.json", "smoke.log", "runs.tar.gz", "install.log",
                                               "pip-freeze.txt"}
    with tarfile.open(out / "runs.tar.gz") as tar:
        assert "runs/math-0.5b/report.html" in tar.getnames()
    assert lines[-1].startswith("smoke: PASSED")
