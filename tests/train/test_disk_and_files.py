"""A full disk, a deleted export manifest and crafted files: each is one line naming the file,
no temporary file survives, and the previous checkpoint stays intact and named.

Faults are injected in-process where the library's behaviour is the point (which writer fails,
what is cleaned up), and real `srpo` processes run where the CLI's is (one line on stderr, the
exit code), on a real full disk (a small tmpfs) where mounting one is allowed.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

import srpo.record.checkpoint as ck
from srpo.cli import main
from srpo.models import build_tiny_model
from srpo.record.checkpoint import (
    EXPORT_MANIFEST,
    STATE_FILE,
    CorruptCheckpointError,
    DiskFullError,
    TrainState,
    export_policy,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_checkpoint_policies,
    save_checkpoint,
    verify_checkpoint,
    verify_export,
)
from srpo.record.report import write_report

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "srpo" / "presets" / "smoke.yaml")
QUIET = ["checkpoint.plots=false", "checkpoint.tensorboard=false", "train.threads=1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
ENV.pop("SRPO_DEBUG", None)


def _srpo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """A real `srpo` process (what a user sees: its exit code and its whole stderr)."""
    return subprocess.run([sys.executable, "-m", "srpo.cli", *args], env=ENV, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def _temporaries(root: Path) -> list[Path]:
    """Every temp file or dir srpo's atomic writes use (.tmp-*, .X.tmp-*, .trash-*)."""
    return [p for p in root.rglob(".*") if ".tmp-" in p.name or p.name.startswith(".trash-")]


def _rehash(ckpt: Path) -> None:
    """Recompute the stored sha256 of every file, as whoever crafted a file can."""
    meta = json.loads((ckpt / STATE_FILE).read_text())
    meta["files"] = {name: ck._sha256(ckpt / name) for name in meta["files"]}
    (ckpt / STATE_FILE).write_text(json.dumps(meta))


def _rehash_export(folder: Path) -> None:
    files = {p.relative_to(folder).as_posix(): ck._sha256(p) for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name != EXPORT_MANIFEST}
    (folder / EXPORT_MANIFEST).write_text(json.dumps({"files": files}))


# ---------------------------------------------------------------- fault injection

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _torch_full_disk(*args, **kwargs):
    """What torch.save raises when a write into its file fails: a RuntimeError during the
    OSError (given a path instead of a file, it keeps not even that)."""
    try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534") from None


def _safetensors_full_disk(*args, **kwargs):
    """What safetensors raises on a full disk (after it created the file)."""
    Path(args[1]).write_bytes(b"\0" * 64)
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def _fail_fsync_of(monkeypatch, fragment: str) -> None:
    """os.fsync of a file whose name contains `fragment` fails with ENOSPC (as on NFS or a quota,
    where a delayed write fails at fsync)."""
    real = os.fsync

    def fsync(fd):
        if fragment in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def _state(step: int) -> TrainState:
    model, _ = build_tiny_model(hidden_size=32, num_layers=1, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt.step()
    return TrainState(step=step, policies={"actor": model}, optimizers={"actor": opt}, config_fingerprint="fp")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names fsync's file through /proc")
@pytest.mark.parametrize("where", ["weights", "optimizer", "rng", "marker", "pointer"])
def test_a_full_disk_during_a_checkpoint_names_the_file_and_keeps_the_previous_one(tmp_path, monkeypatch, where):
    root = tmp_path / "checkpoints"
    save_checkpoint(tmp_path, _state(1))
    if where == "weights":
        monkeypatch.setattr(ck, "save_model", _safetensors_full_disk)
    elif where in ("optimizer", "rng"):
        real = torch.save
        target = "optim-actor.pt" if where == "optimizer" else "rng.pt"
        monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: (
            _torch_full_disk() if f.name.endswith(target) else real(obj, f, *a, **k)))
    else:
        _fail_fsync_of(monkeypatch, STATE_FILE if where == "marker" else ".latest.tmp-")
    with pytest.raises(DiskFullError) as err:
        save_checkpoint(tmp_path, _state(2))
    named = {"weights": "step-2/policy-actor.safetensors", "optimizer": "step-2/optim-actor.pt",
             "rng": "step-2/rng.pt", "marker": f"step-2/{STATE_FILE}", "pointer": "latest"}[where]
    assert str(err.value).startswith(f"the disk is full (No space left on device) while writing {root / named}; ")
    assert (f"the newest intact checkpoint is {root / 'step-1'} (unchanged): free space, then run again "
            f"with resume=true to continue from it") in str(err.value)
    assert err.value.errno == errno.ENOSPC and err.value.path == root / named
    assert _temporaries(tmp_path) == []
    assert list_checkpoints(tmp_path) == [root / "step-1"] == [latest_checkpoint(tmp_path)]
    verify_checkpoint(root / "step-1")
    monkeypatch.undo()  # space again: the next save works and cleans up as usual
    save_checkpoint(tmp_path, _state(2))
    assert latest_checkpoint(tmp_path) == root / "step-2"


@pytest.mark.parametrize("where", ["weights", "manifest"])
def test_a_full_disk_during_an_export_names_the_file_and_keeps_the_earlier_export(tmp_path, monkeypatch, where):
    import transformers.modeling_utils

    model, tok = build_tiny_model(hidden_size=32, num_layers=1, seed=0)
    out = export_policy(model, tok, tmp_path / "export" / "shared")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    if where == "weights":
        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", _safetensors_full_disk)
    else:
        _fail_fsync_of(monkeypatch, EXPORT_MANIFEST)
    with pytest.raises(DiskFullError) as err:
        export_policy(model, tok, out, overwrite=True)
    named = out / ("model.safetensors" if where == "weights" else EXPORT_MANIFEST)
    assert str(err.value) == (f"the disk is full (No space left on device) while writing {named}; the "
                              f"unfinished export was removed and the earlier {out} is unchanged")
    assert _temporaries(tmp_path) == []
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and verify_export(out)


# ---------------------------------------------------------------- a trained run, copied per test


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished smoke run: checkpoints step-1 and step-2, an export, a report."""
    run = tmp_path_factory.mktemp("trained") / "run"
    assert main(["train", SMOKE, f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=0",
                 "checkpoint.every=1"]) == 0
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names fsync's file through /proc")
def test_a_full_disk_during_the_report_removes_its_temp_file_and_keeps_the_old_report(run, monkeypatch, capsys):
    report = run / "report.html"
    old = report.read_bytes()
    _fail_fsync_of(monkeypatch, ".report.html.tmp-")
    with pytest.raises(DiskFullError, match=rf"while writing {report}$"):
        write_report(run)
    assert _temporaries(run) == [] and report.read_bytes() == old
    assert main(["report", str(run)]) == 1
    assert _one_line(capsys.readouterr().err) == (
        f"srpo report: the disk is full (No space left on device) while writing {report}; nothing was "
        f"changed (an earlier report stays as it was): free space and run srpo report again")
    assert _temporaries(run) == [] and report.read_bytes() == old


def test_srpo_train_on_a_full_disk_says_so_in_one_line_and_resume_continues(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    common = [SMOKE, f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=0", "checkpoint.every=1",
              "checkpoint.export=false", "checkpoint.report=false"]
    real = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: (
        _torch_full_disk() if ".tmp-step-2-" in f.name and f.name.endswith("optim-shared.pt")
        else real(obj, f, *a, **k)))
    assert main(["train", *common]) == 1
    step1 = run / "checkpoints" / "step-1"
    assert _one_line(capsys.readouterr().err) == (
        f"srpo train: the disk is full (No space left on device) while writing {run / 'checkpoints' / 'step-2'}"
        f"/optim-shared.pt; the newest intact checkpoint is {step1} (unchanged): free space, then run "
        f"again with resume=true to continue from it")
    assert _temporaries(run) == [] and list_checkpoints(run) == [step1]
    verify_checkpoint(step1)
    monkeypatch.undo()
    assert main(["train", *common, "resume=true"]) == 0
    assert f"resumed from {step1} at step 1" in capsys.readouterr().out
    assert latest_checkpoint(run) == run / "checkpoints" / "step-2"


# ---------------------------------------------------------------- a real full disk


@pytest.fixture
def small_disk(tmp_path):
    """mount(size) -> a fresh tmpfs of that size (root only; unmounted afterwards)."""
    mounted = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk-{len(mounted)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs to fill (needs root and mount rights): "
                        f"{done.stderr.strip() or done.returncode}")
        mounted.append(where)
        return where

    if shutil.which("mount") is None:
        pytest.skip("no mount command to make a small tmpfs with")
    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_real_full_disk_during_a_checkpoint(small_disk):
    """Checkpoints are 1.7 MB each: step-1 and step-2 fit in 4 MiB, step-3 does not."""
    run = small_disk("4m") / "run"
    done = _srpo("train", SMOKE, f"output_dir={run}", *QUIET, "train.steps=3", "eval.size=0",
                 "checkpoint.every=1", "checkpoint.keep_last=2", "checkpoint.export=false")
    assert done.returncode == 1, done.stderr[-3000:]
    line = _one_line(done.stderr)
    step2 = run / "checkpoints" / "step-2"
    assert line.startswith(f"srpo train: the disk is full (No space left on device) while writing "
                           f"{run / 'checkpoints' / 'step-3'}/"), line
    assert line.endswith(f"; the newest intact checkpoint is {step2} (unchanged): free space, then run "
                         f"again with resume=true to continue from it"), line
    assert _temporaries(run) == [] and latest_checkpoint(run) == step2
    verify_checkpoint(step2)


def test_a_real_full_disk_during_the_report(small_disk):
    """A checkpoint (1.7 MB) and the export (0.6 MB) fit in 3 MiB; the report (1.3 MB) does not."""
    run = small_disk("3m") / "run"
    done = _srpo("train", SMOKE, f"output_dir={run}", *QUIET, "train.steps=1", "eval.size=0")
    assert done.returncode == 1, done.stderr[-3000:]
    step1 = run / "checkpoints" / "step-1"
    assert _one_line(done.stderr) == (
        f"srpo train: the disk is full (No space left on device) while writing {run / 'report.html'}; "
        f"the newest intact checkpoint is {step1} (unchanged): free space, then run again with "
        f"resume=true to continue from it (or, as training is complete, `srpo report {run}` writes "
        f"just the report)")
    assert _temporaries(run) == [] and not (run / "report.html").exists()
    verify_checkpoint(step1)
    assert verify_export(run / "export" / "shared")


# ---------------------------------------------------------------- the export manifest


def test_an_export_without_its_manifest_is_refused_unless_trusted(run):
    folder = run / "export" / "shared"
    (folder / EXPORT_MANIFEST).unlink()
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = b"\x3f\x80\x00\x00" * 2  # modified weights, a valid file
    weights.write_bytes(bytes(data))
    done = _srpo("eval", str(run), "--n", "2")
    assert done.returncode == 2
    assert _one_line(done.stderr) == (
        f"srpo eval: {folder} has no {EXPORT_MANIFEST}, so its files cannot be checked (srpo writes one "
        f"with every export: it was deleted, or another tool exported this folder; to evaluate it "
        f"unchecked anyway, pass --trust-export)")
    done = _srpo("eval", str(run), "--n", "2", "--trust-export")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (f"evaluating the trained policies exported in {run / 'export'} (checksums NOT checked: no "
            f"{EXPORT_MANIFEST}, evaluated as --trust-export asks)") in done.stdout
    assert "--trust-export" in _srpo("eval", "--help").stdout


# ---------------------------------------------------------------- crafted files


def _craft(path: Path, how: str) -> None:
    """A safetensors file whose header lies: 2^62 bytes long, offsets past the end, truncated."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    if how == "huge-header":
        raw = struct.pack("<Q", 2 ** 62) + raw[8:]
    elif how == "bad-offsets":
        key = next(k for k in header if k != "__metadata__")
        header[key]["data_offsets"] = [0, 10 ** 9]
        text = json.dumps(header).encode()
        raw = struct.pack("<Q", len(text)) + text + raw[8 + n:]
    else:
        raw = raw[:-100]
    path.write_bytes(raw)


def _smoke_state() -> tuple[torch.nn.Module, TrainState]:
    """A TrainState shaped like a smoke run's (model "model", optimizer and scheduler "shared")."""
    model, _ = build_tiny_model(hidden_size=64, num_layers=2, seed=0)
    opt = torch.optim.AdamW(model.parameters())
    return model, TrainState(step=0, policies={"model": model}, optimizers={"shared": opt},
                             schedulers={"shared": torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)},
                             config_fingerprint="x")


@pytest.mark.parametrize("how", ["huge-header", "bad-offsets", "truncated"])
def test_a_crafted_safetensors_file_is_one_error_naming_it_and_the_intact_checkpoint(trained, tmp_path, how):
    run = tmp_path / "run"
    shutil.copytree(trained / "checkpoints", run / "checkpoints")
    step2 = run / "checkpoints" / "step-2"
    weights = step2 / "policy-model.safetensors"
    _craft(weights, how)
    _rehash(step2)
    verify_checkpoint(step2)  # checksums prove nothing: they were recomputed
    model, state = _smoke_state()
    with pytest.raises(CorruptCheckpointError) as err:
        load_checkpoint(step2, state, allow_config_change=True)
    assert f"{weights} is not a valid safetensors file (Error while deserializing header: " in str(err.value)
    assert f"the newest intact checkpoint is {run / 'checkpoints' / 'step-1'}" in str(err.value)
    with pytest.raises(CorruptCheckpointError, match=f"{weights} is not a valid safetensors file"):
        load_checkpoint_policies(step2, {"model": model})
    export = tmp_path / "export"
    shutil.copytree(trained / "export" / "shared", export)
    _craft(export / "model.safetensors", how)
    _rehash_export(export)
    with pytest.raises(CorruptCheckpointError, match=f"{export / 'model.safetensors'} is not a valid safetensors"):
        verify_export(export)


# slow (about 19 s of srpo commands started as processes):
# CI runs it in its slow pass, so the README's fast command stays under ~10 minutes
@pytest.mark.slow
def test_srpo_refuses_crafted_weights_in_one_line(run):
    step2 = run / "checkpoints" / "step-2"
    _craft(step2 / "policy-model.safetensors", "huge-header")
    _rehash(step2)
    resume = _srpo("train", SMOKE, f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=0",
                   "checkpoint.every=1", "resume=true")
    assert resume.returncode == 2
    assert _one_line(resume.stderr) == (
        f"srpo train: checkpoint {step2} is unusable: {step2 / 'policy-model.safetensors'} is not a valid "
        f"safetensors file (Error while deserializing header: header too large): it was altered or "
        f"written by something else. the newest intact checkpoint is {run / 'checkpoints' / 'step-1'}: "
        f"move step-2 aside (e.g. mv {step2} {step2}.corrupt) and resume again to continue from step 1")
    export = run / "export" / "shared"
    _craft(export / "model.safetensors", "bad-offsets")
    _rehash_export(export)
    done = _srpo("eval", str(run), "--n", "2")
    assert done.returncode == 2
    assert _one_line(done.stderr) == (
        f"srpo eval: {export / 'model.safetensors'} is not a valid safetensors file (Error while "
        f"deserializing header: invalid shape, data type, or offset for tensor): it was altered or "
        f"written by something else")
    shutil.rmtree(run / "export")  # no export: `srpo eval RUN` loads the newest checkpoint, step-2
    done = _srpo("eval", str(run), "--n", "2")
    assert done.returncode == 2
    assert _one_line(done.stderr).startswith(
        f"srpo eval: {step2 / 'policy-model.safetensors'} is not a valid safetensors file")


def test_an_rng_file_of_the_wrong_shape_is_one_line_naming_it(run):
    step2 = run / "checkpoints" / "step-2"
    torch.save({}, step2 / "rng.pt")
    _rehash(step2)
    done = _srpo("train", SMOKE, f"output_dir={run}", *QUIET, "train.steps=2", "eval.size=0",
                 "checkpoint.every=1", "resume=true")
    assert done.returncode == 2
    assert _one_line(done.stderr) == (
        f"srpo train: checkpoint {step2} is unusable: {step2 / 'rng.pt'} does not hold the random "
        f"generator states srpo saves (python, numpy, torch, cuda; no 'python'): it was altered or "
        f"written by something else. the newest intact checkpoint is {run / 'checkpoints' / 'step-1'}: "
        f"move step-2 aside (e.g. mv {step2} {step2}.corrupt) and resume again to continue from step 1")


@pytest.mark.parametrize("content", [[1, 2], {"python": [3, [0], None], "numpy": [], "torch": 0, "cuda": []}])
def test_other_malformed_rng_and_optimizer_files_are_named(trained, tmp_path, content):
    run = tmp_path / "run"
    shutil.copytree(trained / "checkpoints", run / "checkpoints")
    step2 = run / "checkpoints" / "step-2"
    model, state = _smoke_state()
    torch.save(content, step2 / "rng.pt")
    with pytest.raises(CorruptCheckpointError, match=f"{step2 / 'rng.pt'} does not hold the random"):
        load_checkpoint(step2, state, allow_config_change=True, files_verified=True)
    torch.save({"optimizer": content, "scheduler": None}, step2 / "optim-shared.pt")
    with pytest.raises(CorruptCheckpointError, match=f"{step2 / 'optim-shared.pt'} does not hold the optimizer"):
        load_checkpoint(step2, state, allow_config_change=True, files_verified=True)


def test_an_exceeded_quota_counts_as_a_full_disk(tmp_path):
    from srpo.disk import atomic_write_text, disk_full_errno, writing

    with (pytest.raises(DiskFullError,
                        match=rf"the disk is full \({os.strerror(errno.EDQUOT)}\) while writing {tmp_path}"),
          writing(tmp_path)):
        raise SafetensorError(f"I/O error: {os.strerror(errno.EDQUOT)} (os error {errno.EDQUOT})")
    assert disk_full_errno(RuntimeError("unexpected pos 576 vs 534")) is None  # no OS error behind it
    with pytest.raises(ValueError, match="not a disk"), writing(tmp_path):
        raise ValueError("not a disk error")
    assert atomic_write_text(tmp_path / "x.txt", "hi").read_text() == "hi" and _temporaries(tmp_path) == []


@pytest.mark.parametrize("name", ["../../../../etc/hostname", "/etc/hostname", "lora/../../x.pt", "lora//x", ".."])
def test_an_export_manifest_listing_a_path_outside_its_folder_is_refused_before_reading_it(trained, tmp_path, name):
    """An export's manifest may list files in a subfolder (lora/adapter_model.safetensors), never
    a path out of the folder."""
    export = tmp_path / "export"
    shutil.copytree(trained / "export" / "shared", export)
    manifest = json.loads((export / "srpo_export.json").read_text())
    manifest["files"][name] = "0" * 64
    (export / "srpo_export.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptCheckpointError,
                       match=rf"srpo_export.json lists {re.escape(repr(name))}, which is not a file of the export"):
        verify_export(export)


def test_an_export_manifest_checks_the_files_of_its_subfolders(trained, tmp_path):
    export = tmp_path / "export"
    shutil.copytree(trained / "export" / "shared", export)
    (export / "lora").mkdir()
    (export / "lora" / "adapter_model.safetensors").write_bytes(b"x")
    with pytest.raises(CorruptCheckpointError, match="lora/adapter_model.safetensors is not listed"):
        verify_export(export)
    _rehash_export(export)  # listed now, with its checksum
    (export / "lora" / "adapter_model.safetensors").write_bytes(b"y")
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch for .*lora/adapter_model.safetensors"):
        verify_export(export)


@pytest.mark.parametrize("name", ["../../../../etc/hostname", "/etc/hostname", "sub/x.pt", ".."])
def test_a_marker_listing_a_path_outside_its_checkpoint_is_refused_before_reading_it(trained, tmp_path, name):
    """trainer_state.json names the files whose checksums verify_checkpoint reads: a crafted one
    pointing out of the checkpoint (a file elsewhere, or a device that never ends) is refused."""
    ckpt = tmp_path / "step-2"
    shutil.copytree(trained / "checkpoints" / "step-2", ckpt)
    meta = json.loads((ckpt / STATE_FILE).read_text())
    meta["files"][name] = "0" * 64
    (ckpt / STATE_FILE).write_text(json.dumps(meta))
    with pytest.raises(CorruptCheckpointError, match=rf"lists {name!r}, which is not a file of the checkpoint"):
        verify_checkpoint(ckpt)
