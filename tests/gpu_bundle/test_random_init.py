"""Random models of real shapes written as model folders (srpo.models.random_init): the GPU
smoke's stand-in for weights that cannot travel."""

from __future__ import annotations

import json

import pytest
import torch

from srpo.build import build_model
from srpo.config import ModelConfig
from srpo.models.random_init import SHAPES, build_full_vocab_tokenizer, write_random_model


def test_the_full_vocab_tokenizer_decodes_every_id_and_keeps_the_conventions():
    tok = build_full_vocab_tokenizer(151936)
    assert len(tok) == 151936
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    vocab = tok.get_vocab()
    assert len(set(vocab.values())) == len(vocab) == 151936
    fillers = tok.convert_ids_to_tokens(list(range(259, 151936)))
    assert all(t is not None and len(t) == 3 for t in fillers)
    text = "Tom has 12 apples, ünïcode"
    assert tok.decode(tok(text)["input_ids"]) == text  # encoding is still one token per byte
    assert tok.decode([259]) == " aa" and tok.decode([151935]).isalnum()


def test_shapes_are_the_released_qwen_configs():
    small, big = SHAPES["qwen2.5-0.5b"], SHAPES["qwen2.5-1.5b"]
    assert (small["hidden_size"], small["num_hidden_layers"], small["intermediate_size"],
            small["num_attention_heads"], small["num_key_value_heads"]) == (896, 24, 4864, 14, 2)
    assert (big["hidden_size"], big["num_hidden_layers"], big["intermediate_size"],
            big["num_attention_heads"], big["num_key_value_heads"]) == (1536, 28, 8960, 12, 2)
    assert small["vocab_size"] == big["vocab_size"] == 151936


def test_a_written_folder_loads_as_a_model_folder_and_generates_text(tmp_path):
    folder = write_random_model(tmp_path / "m", "qwen2.5-cpu-small", dtype="float32")
    assert json.loads((folder / "config.json").read_text())["vocab_size"] == 151936
    model, tok = build_model(ModelConfig(name=str(folder)))
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.get_input_embeddings().weight.shape == (151936, 64)
    again, _ = build_model(ModelConfig(name=str(write_random_model(tmp_path / "n", "qwen2.5-cpu-small",
                                                                     dtype="float32"))))
    assert torch.equal(model.get_input_embeddings().weight, again.get_input_embeddings().weight)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}],
                                     add_generation_prompt=True, return_tensors="pt")["input_ids"]
    torch.manual_seed(0)
    out = model.generate(prompt, max_new_tokens=6, do_sample=True, pad_token_id=0)
    assert tok.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)
    with pytest.raises(FileExistsError):
        write_random_model(folder, "qwen2.5-cpu-small")
