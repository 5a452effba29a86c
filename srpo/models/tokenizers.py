"""Tokenizers built in code, and the special-token conventions every srpo tokenizer follows.

Convention (shared by the byte tokenizer below and the real SmolLM2 tokenizer):

    id 0  <|endoftext|>  pad (and unk)
    id 1  <|im_start|>   bos; opens every ChatML turn
    id 2  <|im_end|>     eos; closes every ChatML turn

pad must differ from eos: `<|im_end|>` also ends every turn *inside* a chat prompt, so any code
that locates the end of a prompt (or masks padding) by looking for the pad id would cut prompts
at their first turn if pad == eos.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN)  # ids 0, 1, 2 in this order
MAX_LENGTH = 4096  # context of the tiny models (byte tokens make sequences long)

# Plain ChatML. Unlike SmolLM2's own template it injects no default system prompt, so tiny-model
# prompts contain exactly the messages given.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from each byte to a printable unicode character.

    This is the alphabet the `tokenizers` ByteLevel pre-tokenizer emits, spelled out here so the
    vocab order (id = 3 + byte value) is fixed by construction rather than by a set's order.
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """A 259-token byte-level tokenizer built entirely in code (no files, no download).

    Vocab: the 3 special tokens (ids 0-2), then one token per byte (id 3 + byte value). With no
    merges every byte is its own token, so any text, ASCII or not, round-trips exactly through
    encode/decode; sequences are as long as the UTF-8 text, which is fine for tests.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for byte, char in sorted(_bytes_to_unicode().items()):
        vocab[char] = len(SPECIAL_TOKENS) + byte
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # add_prefix_space=False: a leading space would break the round trip of the original text.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=PAD_TOKEN,  # as in SmolLM2; never produced since every byte is in the vocab
        chat_template=CHATML_TEMPLATE,
        # Spaces before punctuation must survive decode for the round trip to hold.
        clean_up_tokenization_spaces=False,
        padding_side="right",  # SmolLM2's default; callers that batch-generate set "left"
        model_max_length=MAX_LENGTH,
    )
    check_special_tokens(tokenizer)
    return tokenizer


def set_pad_token(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Point pad at `<|endoftext|>` (SmolLM2 ships pad == eos == `<|im_end|>`). In place."""
    tokenizer.pad_token = PAD_TOKEN
    check_special_tokens(tokenizer)
    return tokenizer


def set_pad_token_of_folder(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """The tokenizer of a user's model folder, with a pad token distinct from eos. In place.

    Other model families keep their own ids (Qwen2.5: pad `<|endoftext|>` 151643, eos
    `<|im_end|>` 151645, no bos); only the built-in models follow this module's (0, 1, 2).
    A pad that is missing or equal to eos (SmolLM2's own files) becomes `<|endoftext|>` when
    the vocabulary has it; otherwise there is no safe pad and this raises.
    """
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer of {name!r} defines no eos token")
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        if PAD_TOKEN not in tokenizer.get_vocab():
            raise ValueError(
                f"tokenizer of {name!r} has no pad token distinct from eos "
                f"{tokenizer.eos_token!r} and no {PAD_TOKEN!r} to use as one; set a pad_token "
                f"(not the eos token) in its tokenizer_config.json"
            )
        tokenizer.pad_token = PAD_TOKEN
    return tokenizer


def check_special_tokens(tokenizer: PreTrainedTokenizerBase) -> None:
    """Raise if the tokenizer breaks the pad/bos/eos id convention of this module."""
    ids = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    if ids != (0, 1, 2):
        raise ValueError(
            f"expected (pad, bos, eos) ids (0, 1, 2) for {SPECIAL_TOKENS}, got {ids} for "
            f"({tokenizer.pad_token!r}, {tokenizer.bos_token!r}, {tokenizer.eos_token!r})"
        )
