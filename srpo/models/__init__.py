"""Models and tokenizers available offline: tiny random models and SmolLM2-135M-Instruct.

All follow one token convention: pad `<|endoftext|>` = 0, bos `<|im_start|>` = 1,
eos `<|im_end|>` = 2 (pad != eos), ChatML chat template.
"""

from srpo.models.smollm2 import load_smollm2, load_smollm2_tokenizer, smollm2_path
from srpo.models.tiny import build_tiny_model
from srpo.models.tokenizers import build_byte_tokenizer

__all__ = [
    "build_byte_tokenizer",
    "build_tiny_model",
    "load_smollm2",
    "load_smollm2_tokenizer",
    "smollm2_path",
]
