"""The model argument: a name srpo knows, a local Hugging Face folder, or a PreTrainedModel.

    model="smollm2"                    # or "tiny": built by srpo (nothing is downloaded)
    model="path/to/hf-folder"          # config.json, weights, tokenizer
    model=AutoModelForCausalLM.from_pretrained(...), processing_class=tokenizer

A name or a folder goes into the config (model.name) and the trainer builds it. A model object
is wrapped as the run's policies here, as srpo.build.build_policies does for a config: the
whole model trained (policies.kind "shared") or one LoRA adapter on it ("lora", args.lora).
Its tokenizer is required; a pad token equal to eos (SmolLM2's, and many others') is moved to
"<|endoftext|>" in place, as srpo does for every model folder (srpo.models.tokenizers).
The config records the object's `name_or_path` as model.name (or its class name).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from srpo.config import Config
from srpo.rollout.policies import PolicySet

NAMES = ("tiny", "smollm2")
DTYPES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16"}


def is_model_object(model: Any) -> bool:
    from transformers import PreTrainedModel

    return isinstance(model, PreTrainedModel)


def model_name(model: Any, tokenizer: Any) -> str:
    """model.name for a model given by name or folder; refuses anything else it could be."""
    if tokenizer is not None:
        raise ValueError("processing_class / tokenizer: only with a model object; a model given "
                         "by name or folder brings its own tokenizer")
    if isinstance(model, Path):
        model = str(model)
    if not isinstance(model, str):
        raise TypeError(f"model must be 'tiny', 'smollm2', a local Hugging Face model folder or a "
                        f"transformers.PreTrainedModel, got {type(model).__name__}")
    if model in NAMES:
        return model
    folder = Path(model)
    if not (folder / "config.json").is_file():
        problem = ("is a folder without config.json" if folder.is_dir()
                   else "is neither a model srpo knows nor an existing folder")
        raise ValueError(
            f"model {model!r} {problem}: give 'tiny', 'smollm2', a local Hugging Face model "
            f"folder (config.json, weights, tokenizer), or a model object (nothing is downloaded: "
            f"for a Hub model, load it with AutoModelForCausalLM.from_pretrained and pass it, with "
            f"processing_class=its tokenizer)")
    return str(folder.resolve())


def model_record(model: Any) -> dict[str, Any]:
    """The config's model section for a model object: where it came from, and its dtype."""
    dtype = DTYPES.get(str(model.dtype))
    if dtype is None:
        raise ValueError(f"model: its dtype {model.dtype} is not one srpo trains in "
                         f"({sorted(DTYPES.values())})")
    name = getattr(model, "name_or_path", "") or type(model).__name__
    return {"name": str(name), "dtype": dtype}


def model_policies(model: Any, tokenizer: Any, cfg: Config) -> PolicySet:
    """The run's policies over a model object, laid out as cfg.policies says (shared or LoRA)."""
    from srpo.models.precision import resolve_dtype
    from srpo.models.tokenizers import set_pad_token_of_folder

    if tokenizer is None:
        raise ValueError("processing_class: a model object needs its tokenizer (pass "
                         "processing_class=tokenizer, or tokenizer=tokenizer)")
    if not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise TypeError(f"processing_class must be the model's tokenizer (a transformers "
                        f"tokenizer with a chat template), got {type(tokenizer).__name__}")
    tokenizer = set_pad_token_of_folder(tokenizer)
    model = model.to(cfg.device)
    p = cfg.policies
    if p.kind == "shared":
        policies = PolicySet.shared(model, tokenizer, name=p.names[0])
    elif p.kind == "lora":
        lora = p.lora
        policies = PolicySet.lora(model, tokenizer, p.names, rank=lora.rank, alpha=lora.alpha,
                                  dropout=lora.dropout, target_modules=lora.target_modules)
    else:
        raise ValueError(f"model: one model object cannot make policies.kind {p.kind!r} (a model per "
                         f"policy); use args.lora (one base, an adapter per policy) or pass model names")
    policies.compute_dtype = resolve_dtype(cfg.model.dtype, cfg.device)
    return policies
