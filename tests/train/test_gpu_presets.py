"""The GPU recipes (srpo/presets/gpu/, docs/gpu.md, scripts/gpu_smoke.sh), checked on CPU.

Every preset loads; every `srpo train` / `torchrun` command in docs/gpu.md loads as written; the
data-preparation snippets of docs/gpu.md run on small local fixtures; and each preset trains one
step through its documented command with the model swapped for the tiny random one on CPU (the
preset's bf16 kept). A model folder laid out like Qwen2.5's (special tokens at the end of the
vocabulary, no bos, a repetition penalty in generation_config.json) trains too.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from srpo.build import build_workflow_from
from srpo.cli import main
from srpo.config import load_config
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "srpo" / "presets" / "gpu"
PRESETS = sorted(GPU.glob("*.yaml"))
DOC = REPO / "docs" / "gpu.md"
SCRIPT = REPO / "scripts" / "gpu_smoke.sh"
FIXTURES = REPO / "tests" / "fixtures"
# What the CPU runs change besides the model: one short step, no evaluation or outputs.
SMALL = ["device=cpu", "sampling.max_new_tokens=8", "train.steps=1", "train.tasks_per_step=2",
         "group_size=2", "task.train_size=2", "task.heldout_size=1", "eval.size=0",
         "train.warmup_steps=0", "checkpoint.plots=false", "checkpoint.export=false",
         "checkpoint.tensorboard=false"]
# float32 for speed; the bf16 path runs in the GSM8K and Qwen-like-folder tests
TINY = ["model.name=tiny", "model.tokenizer=bytes", "model.dtype=float32", *SMALL]
SHORT_SEARCH = ["task.search.max_observation_chars=600"]  # byte tokens: 4000 chars = 4000 tokens


# --------------------------------------------------------------------------- docs/gpu.md


def _code_lines() -> list[str]:
    """The lines of docs/gpu.md's indented code blocks, indentation removed."""
    return [line[4:] for line in DOC.read_text().splitlines() if line.startswith("    ")]


def _commands() -> list[list[str]]:
    """Every `srpo train srpo/presets/gpu/...` and `torchrun ... train srpo/presets/gpu/...` command."""
    out = []
    for line in _code_lines():
        if line.startswith(("srpo train srpo/presets/gpu/", "torchrun ")):
            out.append(shlex.split(line.split("  #")[0]))
    return out


def _config_and_overrides(argv: list[str]) -> tuple[Path, list[str]]:
    i = next(i for i, a in enumerate(argv) if a.startswith("srpo/presets/gpu/"))
    overrides = argv[i + 1 :]
    assert all("=" in o for o in overrides), argv
    return REPO / argv[i], overrides


def _snippets() -> dict[str, tuple[str, list[str]]]:
    """name -> (python code, documented argv) of each `python - ARGS <<'EOF'` block."""
    lines, out, i = _code_lines(), {}, 0
    while i < len(lines):
        if lines[i].startswith("python - ") and lines[i].endswith("<<'EOF'"):
            argv = shlex.split(lines[i][len("python - ") : -len("<<'EOF'")])
            end = lines.index("EOF", i)
            code = "\n".join(lines[i + 1 : end]) + "\n"
            name = re.match(r"# prepare: ([\w-]+)", code).group(1)
            out[name] = (code, argv)
            i = end
        i += 1
    return out


def run_snippet(name: str, *args: Path | str) -> str:
    code, argv = _snippets()[name]
    assert len(args) == len(argv), f"snippet {name} takes {argv}"
    done = subprocess.run([sys.executable, "-", *map(str, args)], input=code, text=True,
                          capture_output=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def substituted(argv: list[str], paths: dict[str, Path]) -> list[str]:
    """A documented command's overrides with its /path/to/... placeholders replaced."""
    _, overrides = _config_and_overrides(argv)
    out = []
    for o in overrides:
        key, value = o.split("=", 1)
        if value.startswith("/path/to/"):
            value = str(paths.get(value, value))
        out.append(f"{key}={value}")
    return out


def documented(config: str, *must_have: str) -> list[str]:
    """The first documented command of `config` containing all of `must_have`."""
    for argv in _commands():
        if argv[1:2] == ["train"] and argv[2] == f"srpo/presets/gpu/{config}" and all(m in argv for m in must_have):
            return argv
    raise AssertionError(f"docs/gpu.md has no command for {config} with {must_have}")


# --------------------------------------------------------------------------- presets load


@pytest.fixture
def cuda_visible(monkeypatch):
    """load_config refuses device cuda where CUDA is not available: the presets' own device is
    checked as on the GPU machine they are for (runs here override device=cpu instead)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.usefixtures("cuda_visible")
@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_gpu_preset_loads_and_is_a_multi_agent_srpo_cuda_run(path):
    cfg = load_config(path)
    assert (cfg.device, cfg.model.dtype, cfg.train.method) == ("cuda", "bfloat16", "srpo")
    assert cfg.model.name.startswith("/path/to/Qwen2.5-"), "a placeholder the user overrides"
    wf = build_workflow_from(cfg)
    assert wf.name in ("parallel", "search_parallel") and wf.k == 3  # active sets of size 3
    assert set(wf.agents) <= set(cfg.agents)
    assert cfg.policies.kind == "lora" and set(cfg.policies.names) == {cfg.agents[a].policy for a in wf.agents}


@pytest.mark.usefixtures("cuda_visible")
def test_every_documented_command_loads_as_written():
    commands = _commands()
    assert len(commands) >= 10
    for argv in commands:
        config, overrides = _config_and_overrides(argv)
        cfg = load_config(config, overrides)
        assert cfg.device == "cuda", argv


@pytest.mark.usefixtures("cuda_visible")
def test_the_per_scale_table_matches_the_commands():
    rows = [line for line in DOC.read_text().splitlines() if re.match(r"\| (0\.5|1\.5|3|7)B", line)]
    assert len(rows) == 4
    for row in rows:
        cells = [c.strip(" `") for c in row.strip("|").split("|")]
        folder, lr, micro, gen_batch = cells[1], cells[2], cells[3], cells[4]
        argv = documented("math_gsm8k.yaml", f"model.name=/path/to/{folder}", f"train.lr={lr}",
                          f"train.micro_batch_tokens={micro}", f"rollout.max_batch_size={gen_batch}")
        cfg = load_config(*_config_and_overrides(argv))
        assert cfg.train.lr == float(lr) and cfg.train.micro_batch_tokens == int(micro)
    shipped = load_config(GPU / "math_gsm8k.yaml")  # the "3B (as shipped)" row is the files' values
    for path in PRESETS:
        cfg = load_config(path)
        assert (cfg.train.lr, cfg.train.micro_batch_tokens, cfg.rollout.max_batch_size) == (2.0e-5, 4096, 256)
        assert cfg.model.name == shipped.model.name == "/path/to/Qwen2.5-3B-Instruct"


@pytest.mark.usefixtures("cuda_visible")
@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_the_placeholder_model_fails_before_work_with_the_documented_message(path, tmp_path, capsys):
    code = main(["train", str(path), f"output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2
    message = next(line for line in _code_lines() if line.startswith("srpo train: model.name"))
    assert message in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


# --------------------------------------------------------------------------- data, then one step


def _write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _fixture_records(path: Path) -> list[dict]:
    text = path.read_text()
    return (json.loads(text) if text.lstrip().startswith("[")
            else [json.loads(x) for x in text.splitlines() if x.strip()])


def _split_fixture(src: Path, tmp: Path, name: str) -> tuple[Path, Path]:
    """(held-out file, train file): the fixture's first record, then the rest."""
    records = _fixture_records(src)
    return (_write_jsonl(tmp / f"{name}-heldout.jsonl", records[:1]),
            _write_jsonl(tmp / f"{name}-train.jsonl", records[1:]))


def _train_one_step(argv: list[str], paths: dict[str, Path], tmp: Path, model: list[str] = TINY):
    config, _ = _config_and_overrides(argv)
    cfg = load_config(config, [*substituted(argv, paths), *model, f"output_dir={tmp / 'run'}"])
    result = Trainer(cfg).train()
    assert result.steps_done == 1
    assert all(math.isfinite(v) for k, v in result.history[0].items() if k == "loss" or k.startswith("grad_norm/"))
    return cfg, result


def _gsm8k_file(tmp: Path) -> Path:
    heldout, train = _split_fixture(FIXTURES / "math" / "gsm8k.jsonl", tmp, "gsm8k")
    out = tmp / "gsm8k.jsonl"
    assert "records" in run_snippet("gsm8k", heldout, train, out)
    return out


def test_gsm8k_preset_trains_one_step_from_the_documented_data(tmp_path):
    data = _gsm8k_file(tmp_path)
    cfg, _ = _train_one_step(documented("math_gsm8k.yaml"), {"/path/to/gsm8k.jsonl": data}, tmp_path,
                             [*TINY, "model.dtype=bfloat16"])  # the preset's dtype
    assert cfg.model.dtype == "bfloat16" and cfg.train.minibatches == 2


def test_math500_preset_trains_one_step_from_the_documented_data(tmp_path):
    records = _fixture_records(FIXTURES / "math" / "math500.jsonl")
    heldout = _write_jsonl(tmp_path / "math500.jsonl", records[:1])
    train_dir = tmp_path / "MATH" / "train" / "algebra"  # the original release: one problem a file
    train_dir.mkdir(parents=True)
    for i, r in enumerate(records[1:]):
        (train_dir / f"{i}.json").write_text(json.dumps(
            {"problem": r["problem"], "level": "Level 1", "type": "Algebra", "solution": r["solution"]}))
    (train_dir / "9.json").write_text(json.dumps({"problem": "No box.", "solution": "It is 3."}))
    out = tmp_path / "math.jsonl"
    assert "1 held-out, 2 training problems (1 skipped" in run_snippet(
        "math", heldout, tmp_path / "MATH" / "train", out)
    assert [json.loads(x)["answer"] for x in out.read_text().splitlines()] == ["\\frac{1}{2}", "\\sqrt{2}", "1024"]
    _train_one_step(documented("math_math500.yaml"), {"/path/to/math.jsonl": out}, tmp_path)


def _index(corpus: Path, out: Path) -> Path:
    line = next(x for x in _code_lines() if x.startswith("srpo index "))
    argv = [str({"/path/to/corpus.jsonl": corpus, "/path/to/index": out}.get(a, a)) for a in shlex.split(line)]
    assert main(argv[1:]) == 0
    return out


def test_nq_preset_trains_one_step_from_the_documented_data(tmp_path):
    heldout, train = _split_fixture(FIXTURES / "search" / "qa" / "nq.jsonl", tmp_path, "nq")
    questions = tmp_path / "nq.jsonl"
    run_snippet("questions", heldout, 1000, train, questions)
    assert len(questions.read_text().splitlines()) == 3
    docs = _fixture_records(FIXTURES / "search" / "corpus20.jsonl")
    tsv = tmp_path / "psgs_w100.tsv"  # DPR's layout: a header, then id, text, title
    tsv.write_text("id\ttext\ttitle\n" + "".join(f"{d['id']}\t\"{d['text']}\"\t{d['title']}\n" for d in docs))
    corpus = tmp_path / "corpus.jsonl"
    assert "20 passages" in run_snippet("dpr-corpus", tsv, corpus)
    assert _fixture_records(corpus) == docs
    paths = {"/path/to/nq.jsonl": questions, "/path/to/corpus.jsonl": corpus,
             "/path/to/index": _index(corpus, tmp_path / "index")}
    cfg, _ = _train_one_step(documented("search_nq.yaml"), paths, tmp_path, [*TINY, *SHORT_SEARCH])
    assert cfg.task.search.index_dir == str(tmp_path / "index")


def test_wiki18_corpus_snippet_gives_the_same_documents(tmp_path):
    docs = _fixture_records(FIXTURES / "search" / "corpus20.jsonl")
    src = _write_jsonl(tmp_path / "wiki-18.jsonl",
                       [{"id": d["id"], "contents": f"\"{d['title']}\"\n{d['text']}"} for d in docs])
    run_snippet("wiki18-corpus", src, tmp_path / "corpus.jsonl")
    assert _fixture_records(tmp_path / "corpus.jsonl") == docs


def test_hotpotqa_preset_trains_one_step_from_the_documented_data(tmp_path):
    records = _fixture_records(FIXTURES / "search" / "qa" / "hotpotqa.json")
    heldout = tmp_path / "hotpot_dev_distractor_v1.json"  # the official layout: a JSON array
    heldout.write_text(json.dumps(records[:1]))
    train = tmp_path / "hotpot_train_v1.1.json"
    train.write_text(json.dumps(records[1:]))
    questions = tmp_path / "hotpotqa.jsonl"
    run_snippet("questions", heldout, 1000, train, questions)
    corpus = tmp_path / "corpus.jsonl"
    assert "documents" in run_snippet("hotpotqa-corpus", questions, corpus)
    titles = {d["id"] for d in _fixture_records(corpus)}
    assert {"Lake Burley Griffin", "Molonglo River", "Charles Babbage"} <= titles
    paths = {"/path/to/hotpotqa.jsonl": questions, "/path/to/corpus.jsonl": corpus,
             "/path/to/index": _index(corpus, tmp_path / "index")}
    _train_one_step(documented("search_hotpotqa.yaml"), paths, tmp_path, [*TINY, *SHORT_SEARCH])


def test_documented_full_finetuning_variant_trains_one_step(tmp_path):
    argv = documented("math_gsm8k.yaml", "policies.kind=separate")
    model = [o for o in TINY if not o.startswith("model.dtype=")]  # the command's float32 stays
    cfg, _ = _train_one_step(argv, {"/path/to/gsm8k.jsonl": _gsm8k_file(tmp_path)}, tmp_path, model)
    assert (cfg.policies.kind, cfg.model.dtype) == ("separate", "float32")


# --------------------------------------------------------------------------- a Qwen2.5-like folder


def _qwen_like_folder(path: Path) -> Path:
    """A tiny random Qwen2 whose tokenizer is laid out like Qwen2.5's: bytes first, then
    <|endoftext|> (pad), <|im_start|>, <|im_end|> (eos) at the END of the vocabulary, no bos;
    and a generation_config.json with sampling settings and a repetition penalty, as Qwen ships."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config

    from srpo.models.tokenizers import CHATML_TEMPLATE, _bytes_to_unicode

    vocab = {char: byte for byte, char in _bytes_to_unicode().items()}  # ids 0-255
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):  # ids 256-258
        vocab[special] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  chat_template=CHATML_TEMPLATE, clean_up_tokenization_spaces=False,
                                  model_max_length=4096)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (256, None, 258)
    config = Qwen2Config(vocab_size=259, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, pad_token_id=256, bos_token_id=None, eos_token_id=258)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tok.save_pretrained(path)
    GenerationConfig(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05,
                     eos_token_id=[258, 256], pad_token_id=256).save_pretrained(path)
    return path


def test_a_qwen_like_model_folder_trains_one_step(tmp_path):
    folder = _qwen_like_folder(tmp_path / "Qwen2.5-like")
    argv = documented("math_gsm8k.yaml")
    model = [f"model.name={folder}", *SMALL]
    cfg, result = _train_one_step(argv, {"/path/to/gsm8k.jsonl": _gsm8k_file(tmp_path)}, tmp_path, model)
    assert result.history[0]["rollout/tokens/generated"] > 0


def test_generation_config_snippet_turns_the_repetition_penalty_off(tmp_path):
    folder = _qwen_like_folder(tmp_path / "Qwen2.5-like")
    run_snippet("generation-config", folder)
    config = json.loads((folder / "generation_config.json").read_text())
    assert config["repetition_penalty"] == 1.0 and config["temperature"] == 0.7


def test_a_folder_tokenizer_without_a_usable_pad_is_refused():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from srpo.models.tokenizers import set_pad_token_of_folder

    backend = Tokenizer(models.WordLevel(vocab={"a": 0, "<eos>": 1}, unk_token="a"))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", pad_token="<eos>")
    with pytest.raises(ValueError, match="no pad token distinct from eos"):
        set_pad_token_of_folder(tok)


# --------------------------------------------------------------------------- the smoke script


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_smoke_script_parses():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_gpu_smoke_script_runs_the_gpu_presets():
    text = (REPO / "scripts" / "gpu_smoke.py").read_text()  # what gpu_smoke.sh runs
    assert "scripts/gpu_smoke.py" in SCRIPT.read_text()
    for preset in ("math_gsm8k.yaml", "search_nq.yaml"):
        assert (GPU / preset).is_file() and f'"{preset}"' in text
    assert "model.dtype=bfloat16" in text and "max_memory_allocated" in text


@pytest.mark.usefixtures("cuda_visible")
def test_gpu_smoke_script_configs_load(tmp_path):
    """The override lists of the smoke's training checks (scripts/gpu_smoke.py plan()), for a
    GPU, load (random model folders written at small sizes in place of the real shapes)."""
    import importlib.util

    from srpo.models.random_init import write_random_model

    spec = importlib.util.spec_from_file_location("gpu_smoke", REPO / "scripts" / "gpu_smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    data = smoke.write_math_data(tmp_path / "data.jsonl", 32, 200)
    folder = write_random_model(tmp_path / "m", "qwen2.5-cpu-small", dtype="float32")
    plan = smoke.plan("cuda", tmp_path / "runs", data, {"0.5b": folder, "1.5b": folder})
    for name, overrides in plan.items():
        preset = "search_nq.yaml" if name.startswith("search") else "math_gsm8k.yaml"
        cfg = load_config(GPU / preset, overrides)
        assert (cfg.device, cfg.model.dtype) == ("cuda", "bfloat16"), name
        if preset == "math_gsm8k.yaml":
            assert cfg.task.source == "gsm8k" and cfg.workflow.name == "parallel", name
        else:
            assert (cfg.task.search.corpus, cfg.task.search.index_dir) == ("world", None)
            assert build_workflow_from(cfg).name == "search_parallel"



# --------------------------------------------------------------------------- the smoke's harness
# (the checks stubbed: what the harness does when a check fails, CUDA does not start, the budget
# runs out; the real checks run on CPU in tests/gpu_bundle)


def _smoke_module(monkeypatch, tmp_path, *, device="cpu", budget="540", plain=None):
    import importlib.util

    monkeypatch.setenv("SMOKE_DEVICE", device)
    monkeypatch.setenv("SMOKE_BUDGET_S", budget)
    monkeypatch.setenv("SMOKE_BIG", "0")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.setenv("SMOKE_WORK", str(tmp_path / "work"))
    if plain is not None:
        monkeypatch.setenv("SMOKE_PLAIN", plain)
    spec = importlib.util.spec_from_file_location("gpu_smoke_harness", REPO / "scripts" / "gpu_smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    return smoke


def _stub_checks(smoke, calls, *, fast_path_fails):
    """Training checks that fail unless on the plain path (fast_path_fails), and record their
    overrides; every other check passes. A run directory with a metrics file and a heavy
    checkpoint is written, as a real check would."""

    def train_check(preset, overrides, **kwargs):
        used = [*overrides, *smoke.PATH_OVERRIDES]
        calls.append(used)
        out = Path(next(o.split("=", 1)[1] for o in reversed(used) if o.startswith("output_dir=")))
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        (out / "checkpoints" / "weights.bin").write_bytes(b"\0" * 1024)
        (out / "metrics.jsonl").write_text('{"step": 1}\n')
        if fast_path_fails and "train.share_prompt_forward=false" not in used:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nline two")
        return out, {"steps": "2/2"}

    smoke.env_check = lambda: (None, {"torch": "stub"})
    smoke.train_check = train_check
    smoke.init_check = lambda shape, folder: (folder, {"shape": shape})
    smoke.cli_check = lambda args, expect=None: (None, {})


def test_smoke_retries_the_first_failed_training_check_on_the_plain_path_and_keeps_it(monkeypatch, tmp_path, capsys):
    smoke = _smoke_module(monkeypatch, tmp_path)
    calls: list[list[str]] = []
    _stub_checks(smoke, calls, fast_path_fails=True)
    assert smoke.main() == 1  # tiny failed: the smoke as a whole did not pass
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("smoke:")]
    result = json.loads((tmp_path / "out" / "smoke.json").read_text())
    checks = {c["check"]: c for c in result["checks"]}
    assert checks["tiny"]["ok"] is False and "illegal memory access" in checks["tiny"]["error"]
    assert "\n" not in checks["tiny"]["error"]  # one line, whatever the message held
    assert checks["tiny-plain"]["ok"] is True and checks["tiny-plain"]["path"] == "plain"
    # every later training check ran on the plain path, in its own output_dir for the retry
    assert all(set(smoke.PLAIN) <= set(c) for c in calls[1:]) and len(calls) == 5
    assert any(o.endswith("/tiny-plain") for o in calls[1] if o.startswith("output_dir="))
    assert all(checks[n].get("path") == "plain" for n in ("math-0.5b", "resume-0.5b", "search-0.5b"))
    assert result["plain_path"] is True and result["finished"] is True
    # stdout: one line per check (10: env, tiny, tiny-plain, init, math, resume, search, eval,
    # report, then the verdict)
    assert len(lines) == 10 and lines[-1].startswith("smoke: FAILED 8/9 checks")


def test_smoke_out_holds_three_files_and_the_archive_leaves_out_weights(monkeypatch, tmp_path):
    import tarfile

    smoke = _smoke_module(monkeypatch, tmp_path)
    _stub_checks(smoke, [], fast_path_fails=False)
    assert smoke.main() == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["runs.tar.gz", "smoke.json", "smoke.log"]
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert "runs/tiny/metrics.jsonl" in names and not any("checkpoints" in n for n in names)
    result = json.loads((out / "smoke.json").read_text())
    assert result["passed"] and result["archive"]["holds"] == "all" and not result["plain_path"]
    assert "tiny-plain" not in {c["check"] for c in result["checks"]}


def test_smoke_reports_cuda_failing_to_start_as_a_failed_check_not_a_traceback(monkeypatch, tmp_path, capsys):
    """On a machine where CUDA cannot start (here: a CPU build of torch told device=cuda), the
    peak-memory reset that precedes each check raises: each check is a FAIL line with the error,
    and smoke.json and the archive are written."""
    smoke = _smoke_module(monkeypatch, tmp_path, device="cuda")
    if torch.cuda.is_available():
        pytest.skip("CUDA starts here")
    _stub_checks(smoke, [], fast_path_fails=False)
    assert smoke.main() == 1
    out = capsys.readouterr().out
    assert "smoke: env          FAIL" in out and "Traceback" not in out
    result = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert result["finished"] and not result["passed"] and result["checks"][0]["error"]
    assert (tmp_path / "out" / "runs.tar.gz").is_file()


def test_smoke_skips_what_would_start_past_its_budget(monkeypatch, tmp_path, capsys):
    smoke = _smoke_module(monkeypatch, tmp_path, budget="0", plain="1")
    _stub_checks(smoke, [], fast_path_fails=False)
    assert smoke.main() == 1  # nothing ran: nothing passed
    result = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert result["skipped"][:2] == ["env", "tiny"] and result["plain_path"] is True
    assert "SKIP" in capsys.readouterr().out
