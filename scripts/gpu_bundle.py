#!/usr/bin/env python3
"""Build the offline GPU smoke bundle: everything the GPU machine lacks, under 64 MiB.

The target image (docs/gpu.md, section 5): Python 3.12, torch 2.11 (CUDA 13), transformers 5.17,
peft, accelerate, safetensors, tokenizers, pytest, rich, tqdm (and their own dependencies:
numpy, pyyaml, sympy, ...); no registry can be reached there, and at most 64 MiB of files travel
with a run. The bundle holds wheels of what srpo's smoke needs beyond that (pinned below),
srpo's own wheel (built from this checkout, so its entry points exist once installed), the
smoke script with the two presets it runs, and install_and_smoke.sh.

    python scripts/gpu_bundle.py                    # for the GPU image: Python 3.12, manylinux x86_64
    python scripts/gpu_bundle.py --target local     # the same bundle for this interpreter (tests)
    python scripts/gpu_bundle.py --target local --image-wheels   # + wheels of the image's own
                                                    # packages for this interpreter (the clean-venv test)
    python scripts/gpu_bundle.py --check            # verify a built gpu bundle: tags + offline resolution

Wheels are fetched once, by pinned version, from the package index (`pip download --no-deps
--only-binary=:all:`) into a cache (default .cache/gpu-bundle/, git-ignored) and reused from
there: with everything cached, --offline builds without the network. The bundle goes to
dist/gpu-bundle-<target>/ (git-ignored); its size is printed and a bundle over the limit is
refused (--limit-mib, default 64, minus this checkout's tracked files when --with-tree, as the
GPU machine's runner carries the working tree too).

On the GPU machine: `bash dist/gpu-bundle-gpu/install_and_smoke.sh` (results under $OUT).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What the smoke needs and the image lacks: (distribution, version), the versions srpo is
# tested with (.venv). pydantic (srpo.config) and its dependencies; math-verify and its parser
# (srpo.tasks.math.scoring's fallback beyond plain numbers; sympy is in the image, torch needs
# it); bm25s + PyStemmer (the search pack's BM25). typing-extensions: pydantic 2.14 needs
# >= 4.16, newer than torch's floor; pip keeps the image's copy when it is new enough.
# Not here: reasoning-gym (its pycosat 0.6.6 has no wheel for any Python and needs a compiler
# and Python 3.12's headers, and cellpylib pulls in matplotlib): the smoke writes GSM8K-format
# arithmetic data instead, read by the GPU preset's own loader (task.source: gsm8k).
BUNDLE_WHEELS = [
    ("pydantic", "2.14.4"),
    ("pydantic-core", "2.50.5"),
    ("annotated-types", "0.8.0"),
    ("typing-inspection", "0.4.5"),
    ("typing-extensions", "4.16.0"),
    ("math-verify", "0.9.0"),
    ("latex2sympy2-extended", "1.11.0"),
    ("antlr4-python3-runtime", "4.13.2"),
    ("bm25s", "0.3.16"),
    ("PyStemmer", "3.1.0"),
]
# What install_and_smoke.sh asks pip for (the rest comes in as their dependencies).
INSTALL = ["srpo", "math-verify", "bm25s", "PyStemmer"]

# The image's packages, for --check (stubbed as installed) and --image-wheels (real wheels for
# this interpreter, the clean-venv test: torch 2.13.0 CPU stands in for 2.11 CUDA, the others
# at the versions srpo is tested with). The stub versions are the image's where documented
# (torch 2.11, transformers 5.17) and otherwise assumed (the lowest srpo accepts or a release
# of that time): a check of resolution, not of those packages.
IMAGE_STUBS = [
    ("torch", "2.11.0"), ("transformers", "5.17.0"), ("peft", "0.18.0"), ("accelerate", "1.12.0"),
    ("safetensors", "0.7.0"), ("tokenizers", "0.22.2"), ("pytest", "9.0.0"), ("rich", "14.2.0"),
    ("tqdm", "4.67.1"), ("numpy", "2.3.5"), ("pyyaml", "6.0.3"), ("sympy", "1.14.0"),
    ("mpmath", "1.3.0"),
]
IMAGE_LOCAL = [
    ("torch", "2.13.0"), ("transformers", "5.24.0"), ("peft", "0.21.2"), ("accelerate", "1.16.0"),
    ("safetensors", "0.8.0"), ("tokenizers", "0.23.3"), ("pytest", "9.2.0"), ("rich", "15.0.0"),
    ("tqdm", "4.70.1"),
]
# pydantic and its dependencies come with this machine's typer (a transformers dependency) but
# are not in the GPU image: the clean-venv test removes them so the bundle must bring them.
IMAGE_LOCAL_REMOVE = ["pydantic", "pydantic-core", "annotated-types", "typing-inspection"]

GPU_PYTHON = "3.12"
GPU_ABI = "cp312"
# manylinux_2_28: PyStemmer 3.1.0's cp312 wheel (manylinux_2_28 / manylinux1); any image with
# CUDA 13 has glibc >= 2.28.
GPU_PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"]
LIMIT_MIB = 64
PRESETS = ["math_gsm8k.yaml", "search_nq.yaml"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_name_version(path: Path) -> tuple[str, str]:
    parts = path.name[: -len(".whl")].split("-")
    return norm(parts[0]), parts[1]


def wheel_tags(path: Path) -> tuple[set[str], set[str], set[str]]:
    """(python tags, abi tags, platform tags) from a wheel's file name."""
    py, abi, plat = path.name[: -len(".whl")].split("-")[-3:]
    return set(py.split(".")), set(abi.split(".")), set(plat.split("."))


_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def tag_problem(path: Path, target: str) -> str | None:
    """Why `path` would not install on the target (None: it would)."""
    py, abi, plat = wheel_tags(path)
    if target == "gpu":
        if plat == {"any"}:  # pure Python
            if abi <= {"none"} and py & {"py3", "py312", "cp312"}:
                return None
            return f"pure wheel for python {py} abi {abi}"
        manylinux = [p for p in plat if re.fullmatch(r"manylinux(1|2010|2014|_2_\d+)_x86_64", p)]
        if not manylinux:
            return f"platform {plat} is not manylinux x86_64"
        glibc = min(_GLIBC.get(p.split("_x86_64")[0]) or tuple(map(int, p.split("_")[1:3]))
                    for p in manylinux)
        if glibc > (2, 28):
            return f"needs glibc {glibc} (> 2.28)"
        if GPU_ABI in py and GPU_ABI in abi:
            return None
        if "abi3" in abi and any(re.fullmatch(r"cp3(\d+)", t) and int(t[3:]) <= 12 for t in py):
            return None
        return f"python {py} abi {abi} is not for CPython 3.12"
    # local: what this interpreter's pip accepts
    from pip._internal.utils.compatibility_tags import get_supported

    supported = {(t.interpreter, t.abi, t.platform) for t in get_supported()}
    ok = any((p, a, pl) in supported for p in py for a in abi for pl in plat)
    return None if ok else f"tags {py}-{abi}-{plat} not supported by this Python"


def pip(*args: str, quiet: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        err = "\n".join(line for line in proc.stderr.splitlines()
                        if "is ignored: it is neither a file nor a directory" not in line)
        raise SystemExit(f"gpu_bundle: `pip {' '.join(args)}` failed:\n{err[-3000:]}")
    return proc


def platform_args(target: str) -> list[str]:
    if target != "gpu":
        return []
    args = ["--python-version", GPU_PYTHON, "--implementation", "cp", "--abi", GPU_ABI,
            "--abi", "abi3", "--abi", "none"]
    for p in GPU_PLATFORMS:
        args += ["--platform", p]
    return args


def cached_wheel(cache: Path, name: str, version: str, target: str) -> Path | None:
    for path in sorted(cache.glob("*.whl")):
        if wheel_name_version(path) == (norm(name), version) and tag_problem(path, target) is None:
            return path
    return None


def fetch(cache: Path, pins: list[tuple[str, str]], target: str, *, offline: bool) -> list[Path]:
    """One wheel per pin, from the cache or fetched (no dependencies: the pins are the closure)."""
    cache.mkdir(parents=True, exist_ok=True)
    found = []
    for name, version in pins:
        path = cached_wheel(cache, name, version, target)
        if path is None:
            if offline:
                raise SystemExit(f"gpu_bundle: {name}=={version} is not in {cache} (--offline); "
                                 f"run once without --offline on a machine that reaches the index")
            print(f"gpu_bundle: fetching {name}=={version}", flush=True)
            pip("download", "--no-deps", "--only-binary=:all:", *platform_args(target),
                "-d", str(cache), f"{name}=={version}")
            path = cached_wheel(cache, name, version, target)
            if path is None:
                raise SystemExit(f"gpu_bundle: no usable wheel of {name}=={version} for {target}")
        found.append(path)
    return found


def build_srpo_wheel(dest: Path) -> Path:
    """srpo's wheel from this checkout (offline: the build backend comes from this interpreter)."""
    with tempfile.TemporaryDirectory() as tmp:
        # a copy of the tracked files only: no stale build/ or egg-info of the checkout leaks in
        src = Path(tmp) / "src"
        files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                                "--exclude-standard", "srpo", "pyproject.toml", "README.md"],
                               capture_output=True, check=True).stdout.decode().split("\0")
        for rel in filter(None, files):
            if (ROOT / rel).is_file():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, src / rel)
        pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dest), str(src))
    wheels = sorted(dest.glob("srpo-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"gpu_bundle: expected one srpo wheel in {dest}, found {wheels}")
    with zipfile.ZipFile(wheels[0]) as z:
        eps = next((n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")), None)
        text = z.read(eps).decode() if eps else ""
    if "[srpo.task_packs]" not in text:
        raise SystemExit(f"gpu_bundle: {wheels[0].name} declares no srpo.task_packs entry points")
    return wheels[0]


def tracked_tree_bytes() -> int:
    proc = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                          check=False)
    if proc.returncode != 0:
        return 0
    return sum((ROOT / p).stat().st_size for p in proc.stdout.decode().split("\0")
               if p and (ROOT / p).is_file())


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(args: argparse.Namespace) -> Path:
    target = args.target
    cache = Path(args.cache) / (target if target == "gpu" else f"local-{local_tag()}")
    out = Path(args.out or ROOT / "dist" / f"gpu-bundle-{target}")
    wheels = fetch(cache, BUNDLE_WHEELS, target, offline=args.offline)
    if out.exists():
        shutil.rmtree(out)
    (out / "wheels").mkdir(parents=True)
    for w in wheels:
        shutil.copy2(w, out / "wheels" / w.name)
    srpo_wheel = build_srpo_wheel(out / "wheels")
    shutil.copy2(ROOT / "scripts" / "gpu_smoke.py", out / "gpu_smoke.py")
    shutil.copy2(ROOT / "scripts" / "gpu_bundle_install.sh", out / "install_and_smoke.sh")
    (out / "configs" / "gpu").mkdir(parents=True)
    for name in PRESETS:
        shutil.copy2(ROOT / "srpo" / "presets" / "gpu" / name, out / "configs" / "gpu" / name)
    (out / "requirements.txt").write_text(
        "# what install_and_smoke.sh installs (pinned; the rest are their dependencies)\n"
        + "".join(f"{n}=={v}\n" for n, v in [("srpo", wheel_name_version(srpo_wheel)[1]),
                                           *[(n, v) for n, v in BUNDLE_WHEELS
                                             if n in INSTALL]]))
    problems = {w.name: p for w in (out / "wheels").glob("*.whl")
                if (p := tag_problem(w, target))}
    if problems:
        raise SystemExit(f"gpu_bundle: wheels that would not install on {target}: {problems}")
    manifest = {"target": target, "python": GPU_PYTHON if target == "gpu" else local_tag(),
                "platforms": GPU_PLATFORMS if target == "gpu" else ["this machine"],
                "wheels": [{"file": w.name, "bytes": w.stat().st_size, "sha256": sha256(w)}
                           for w in sorted((out / "wheels").glob("*.whl"))]}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if args.tar:
        shutil.make_archive(str(out), "gztar", root_dir=out.parent, base_dir=out.name)
    size = dir_bytes(out)
    tree = tracked_tree_bytes() if args.with_tree else 0
    for w in manifest["wheels"]:
        print(f"  {w['bytes'] / 2**20:7.2f} MiB  {w['file']}")
    print(f"gpu_bundle: {out} ({target}): {len(manifest['wheels'])} wheels, "
          f"{size / 2**20:.2f} MiB in all"
          + (f"; with the checkout's tracked files ({tree / 2**20:.2f} MiB): "
             f"{(size + tree) / 2**20:.2f} MiB" if tree else ""), flush=True)
    if size + tree > args.limit_mib * 2**20:
        shutil.rmtree(out)
        raise SystemExit(f"gpu_bundle: refused: {(size + tree) / 2**20:.2f} MiB is over the "
                         f"{args.limit_mib} MiB limit (bundle removed)")
    if args.image_wheels:
        fetch_image_wheels(Path(args.cache) / f"image-{local_tag()}", offline=args.offline)
    return out


def local_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def fetch_image_wheels(dest: Path, *, offline: bool) -> None:
    """Wheels of the image's packages and their dependencies, for this interpreter (the
    clean-venv test installs them with --no-index). Resolved with dependencies, once."""
    pins = [f"{n}=={v}" for n, v in IMAGE_LOCAL]
    stamp = dest / ("image-" + hashlib.sha256(" ".join(pins).encode()).hexdigest()[:12] + ".ok")
    if stamp.is_file():
        return
    if offline:
        raise SystemExit(f"gpu_bundle: the image's wheels are not in {dest} (--offline)")
    dest.mkdir(parents=True, exist_ok=True)
    print(f"gpu_bundle: fetching the image's packages for this Python into {dest}", flush=True)
    pip("download", "--only-binary=:all:", "-d", str(dest), *pins)
    stamp.write_text(" ".join(pins) + "\n")


# --------------------------------------------------------------------------- --check


def stub_wheel(dest: Path, name: str, version: str) -> Path:
    """An empty wheel that only says `name==version` is installed (no files, no dependencies)."""
    dist = f"{norm(name)}-{version}"
    path = dest / f"{dist}-py3-none-any.whl"
    files = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: srpo-gpu-bundle\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v.encode()).digest()).rstrip(b'=').decode()},{len(v)}\n"
        for k, v in files.items()) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in {**files, f"{dist}.dist-info/RECORD": record}.items():
            z.writestr(k, v)
    return path


def check(args: argparse.Namespace) -> None:
    """The gpu bundle's wheels carry CPython 3.12 manylinux x86_64 (or pure) tags, and
    `pip install --dry-run --no-index` for Python 3.12 / manylinux resolves INSTALL from the
    bundle alone, with the image's packages stubbed as installed (empty wheels of their names
    and versions in a second find-links folder). Every package pip would take must be a bundle
    wheel or a stub; a stub pip would take means the image has it, so nothing else is needed."""
    out = Path(args.out or ROOT / "dist" / "gpu-bundle-gpu")
    wheels = sorted((out / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(f"gpu_bundle: no wheels in {out / 'wheels'}: build it first")
    problems = {w.name: p for w in wheels if (p := tag_problem(w, "gpu"))}
    for w in wheels:
        print(f"  tags ok: {w.name}" if w.name not in problems else f"  BAD: {w.name}: {problems[w.name]}")
    if problems:
        raise SystemExit(f"gpu_bundle: {len(problems)} wheels with bad tags")
    requirements = out / "requirements.txt"
    with tempfile.TemporaryDirectory() as tmp:
        stubs = Path(tmp) / "stubs"
        stubs.mkdir()
        for name, version in IMAGE_STUBS:
            stub_wheel(stubs, name, version)
        report = Path(tmp) / "report.json"
        pip("install", "--dry-run", "--no-index", "--find-links", str(out / "wheels"),
            "--find-links", str(stubs), "--only-binary=:all:", *platform_args("gpu"),
            "--target", str(Path(tmp) / "target"), "--ignore-installed", "--report", str(report),
            "-r", str(requirements))
        taken = json.loads(report.read_text())["install"]
    bundle = {wheel_name_version(w) for w in wheels}
    stubbed = {(norm(n), v) for n, v in IMAGE_STUBS}
    print("gpu_bundle: offline resolution for CPython 3.12 manylinux x86_64 would install:")
    strange = []
    for item in taken:
        key = (norm(item["metadata"]["name"]), item["metadata"]["version"])
        where = "bundle" if key in bundle else "image (stub)" if key in stubbed else "??"
        if where == "??":
            strange.append(key)
        print(f"  {key[0]}=={key[1]}  from {where}")
    unused = sorted(bundle - {(norm(i["metadata"]["name"]), i["metadata"]["version"]) for i in taken})
    if strange:
        raise SystemExit(f"gpu_bundle: resolution took packages from neither: {strange}")
    print(f"gpu_bundle: check passed ({len(wheels)} wheels; unused by the resolution: "
          f"{unused or 'none'})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=["gpu", "local"], default="gpu",
                   help="gpu: CPython 3.12 manylinux x86_64 (the GPU image); local: this Python")
    p.add_argument("--out", help="the bundle folder (default dist/gpu-bundle-<target>)")
    p.add_argument("--cache", default=str(ROOT / ".cache" / "gpu-bundle"),
                   help="where fetched wheels are kept and reused (default .cache/gpu-bundle)")
    p.add_argument("--offline", action="store_true", help="never fetch: every wheel must be cached")
    p.add_argument("--tar", action="store_true", help="also write <bundle>.tar.gz")
    p.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    p.add_argument("--with-tree", action="store_true",
                   help="count this checkout's tracked files against the limit too (the GPU "
                        "machine's runner carries the working tree with the bundle)")
    p.add_argument("--image-wheels", action="store_true",
                   help="also fetch the image's packages for this Python (the clean-venv test)")
    p.add_argument("--check", action="store_true",
                   help="check a built gpu bundle (tags, offline resolution); builds nothing")
    args = p.parse_args(argv)
    if args.check:
        check(args)
        return 0
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    build(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
