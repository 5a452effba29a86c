"""Randomly initialised models of real shapes, written as a plain Hugging Face model folder.

For checking code paths at a real scale (CUDA, bf16, LoRA, memory, throughput) where no real
weights can be had (e.g. a GPU machine that nothing over 64 MiB reaches): the weights are
created where the folder is written, from a config, and never shipped. Such a model's outputs
are noise; it checks speed and memory, not learning.

    folder = write_random_model("/tmp/qwen-0.5b-random", "qwen2.5-0.5b", dtype="bfloat16", device="cuda")
    srpo train srpo/presets/gpu/math_gsm8k.yaml model.name=/tmp/qwen-0.5b-random ...

The folder holds config.json (the architecture's real sizes, e.g. Qwen2.5-0.5B-Instruct's:
24 layers, hidden 896, vocab 151,936), model.safetensors, generation_config.json and a
tokenizer built in code with the model's full vocabulary: srpo's byte tokenizer (ids 0-258,
pad/bos/eos 0/1/2) plus filler tokens of three ASCII characters, so every id a random model
samples decodes to text (encoding stays one token per byte). The real Qwen tokenizer is not
needed, and the embedding and lm_head have their real sizes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

from srpo.models.tokenizers import (
    BOS_TOKEN,
    CHATML_TEMPLATE,
    EOS_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    _bytes_to_unicode,
    check_special_tokens,
)

# The architecture fields of the released config.json files (Qwen2.5-*-Instruct); the token ids
# are srpo's (pad/bos/eos 0/1/2), as the tokenizer here is srpo's byte tokenizer.
_QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "use_sliding_window": False,
    "use_cache": True,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SHAPES: dict[str, dict[str, Any]] = {
    # Qwen2.5-0.5B-Instruct: 494M parameters (136M of them the tied embedding)
    "qwen2.5-0.5b": {**_QWEN2, "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "max_window_layers": 21},
    # Qwen2.5-1.5B-Instruct: 1.54B parameters
    "qwen2.5-1.5b": {**_QWEN2, "hidden_size": 1536, "intermediate_size": 8960,
                     "num_hidden_layers": 28, "num_attention_heads": 12,
                     "num_key_value_heads": 2, "max_window_layers": 21},
    # for CPU checks of the same code path: Qwen2.5's vocabulary, tiny layers
    "qwen2.5-cpu-small": {**_QWEN2, "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "max_window_layers": 2,
                          "max_position_embeddings": 4096, "sliding_window": 4096},
}
_FILLER_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def build_full_vocab_tokenizer(vocab_size: int, model_max_length: int = 4096) -> PreTrainedTokenizerFast:
    """srpo's byte tokenizer grown to `vocab_size` ids with filler tokens.

    Ids 0-2 are pad/bos/eos, 3-258 the bytes (as in build_byte_tokenizer), then filler tokens
    " ab" (a space and 2 ASCII letters or digits; the first 3,844) and "Xy7" (3 of them): with
    no merges, encoding never produces them, but a random model samples them and they decode
    to text.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for byte, char in sorted(_bytes_to_unicode().items()):
        vocab[char] = len(SPECIAL_TOKENS) + byte
    base = len(vocab)
    if vocab_size < base:
        raise ValueError(f"vocab_size must be at least {base}, got {vocab_size}")
    space = _bytes_to_unicode()[ord(" ")]  # "Ġ", the byte-level form of a space
    n = len(_FILLER_ALPHABET)
    if vocab_size - base > n ** 3:
        raise ValueError(f"vocab_size {vocab_size} is too large for the filler tokens")
    for j in range(vocab_size - base):
        if j < n * n:  # " ab": a space, then 2 characters
            token = space + _FILLER_ALPHABET[j // n] + _FILLER_ALPHABET[j % n]
        else:  # "Xy7": 3 characters (3 base-62 digits of j)
            token = "".join(_FILLER_ALPHABET[(j // n ** k) % n] for k in (2, 1, 0))
        vocab[token] = base + j
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
        unk_token=PAD_TOKEN, chat_template=CHATML_TEMPLATE, clean_up_tokenization_spaces=False,
        padding_side="right", model_max_length=model_max_length,
    )
    check_special_tokens(tokenizer)
    if len(tokenizer) != vocab_size:
        raise AssertionError(f"built {len(tokenizer)} tokens, expected {vocab_size}")
    return tokenizer


def write_random_model(
    folder: str | Path,
    shape: str | dict[str, Any],
    *,
    seed: int = 0,
    dtype: str = "bfloat16",
    device: str = "cpu",
) -> Path:
    """Write a randomly initialised model of `shape` (a name in SHAPES or a config.json dict)
    into `folder` (created; must be empty or absent). Returns the folder. Same seed, same
    weights. The weights are initialised on `device` (fast on a GPU), then saved."""
    config_dict = dict(SHAPES[shape]) if isinstance(shape, str) else dict(shape)
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} is not empty")
    folder.mkdir(parents=True, exist_ok=True)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                   "float16": torch.float16}[dtype]
    config_dict["torch_dtype"] = dtype
    (folder / "config.json").write_text(json.dumps(config_dict, indent=2) + "\n")
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    tokenizer = build_full_vocab_tokenizer(config.vocab_size, config.max_position_embeddings)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        if device.startswith("cuda"):
            torch.cuda.manual_seed_all(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return folder
