"""Final-answer extraction from a model's free text.

Priority, first that finds something wins:
  1. "boxed":  the content of the LAST complete `\\boxed{...}` (or `\\fbox{...}`), nested braces
     handled; an unclosed box (a generation cut off mid-answer) is ignored.
  2. "answer": the LAST explicit "the (final) answer is X" / "Answer: X" / "#### X".
  3. "number": the last number in the text (integers, negatives, decimals, 1,234-style
     thousands separators, which are removed, scientific notation such as 4.5927e+01, and
     hexadecimal literals such as -0x3f).
None when nothing is found. The method is reported so a reward can require a format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

METHODS = ("boxed", "answer", "number")


@dataclass(frozen=True)
class Extraction:
    """An extracted answer and the rule that found it ("boxed" | "answer" | "number")."""

    text: str
    method: str


_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")

# "answer is X", "final answer: X", "Answer = X", markdown "**Answer:** X", GSM8K "#### X".
_ANSWER = re.compile(
    r"(?:(?<![a-z])answer\s*(?:\*\*)?\s*(?:is\s*[:=]?|[:=])|####)\s*(?P<x>[^\n]*)",
    re.IGNORECASE,
)
# A sentence end inside the captured line: a period followed by whitespace (not a decimal point).
_SENTENCE_END = re.compile(r"\.(?=\s)")

# A number not glued to a word or to a preceding decimal point. The minus sign counts only when
# it is not a binary minus ("3-4" ends in the number 4, "x = -4" in -4).
# A hexadecimal literal (0x217e, reasoning-gym's bitwise_arithmetic) is one number: read as
# decimal digits it would end in "0", which scored every hex gold as equal to a reply "0".
# Scientific notation (4.592700000000000e+01, how reasoning-gym's number_format writes numbers
# and how a model copies them) is one number: without the exponent it read as "01", scoring
# every right answer in that form wrong.
_NUMBER = re.compile(
    r"(?<![\w.])(?:(?<![\w)\]}])-)?"
    r"(?:0[xX][0-9a-fA-F]+(?!\w)|\d{1,3}(?:,\d{3})+(?![\d,])(?:\.\d+)?"
    r"|(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?)"
)

# Unicode minus signs models emit; read as ASCII "-".
_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})


def _balanced_content(text: str, start: int) -> str | None:
    """Content from `start` (just after an opening brace) to its matching brace, else None."""
    depth = 1
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":  # \{ and \} are literal braces, not grouping
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete, non-empty `\\boxed{...}` in text, else None."""
    found = None
    for m in _BOX_OPEN.finditer(text):
        content = _balanced_content(text, m.end())
        if content is not None and content.strip():
            found = content.strip()
    return found


def _clean_answer_phrase(raw: str) -> str:
    """Trim an "answer is ..." capture to the answer: first sentence, no markdown or period."""
    m = _SENTENCE_END.search(raw)
    if m:
        raw = raw[: m.start()]
    raw = raw.strip().strip("*").strip()
    # A period ending the line is a sentence end ("is 42." -> "42"; "3." and "3" are equal).
    if raw.endswith("."):
        raw = raw[:-1]
    return raw.strip().strip("*").strip()


def last_answer_phrase(text: str) -> str | None:
    """X of the last "answer is X" / "Answer: X" / "#### X" with a non-empty X, else None."""
    found = None
    for m in _ANSWER.finditer(text):
        x = _clean_answer_phrase(m.group("x"))
        if x:
            found = x
    return found


def last_number(text: str) -> str | None:
    """The last number in text as a plain string (thousands separators removed), else None."""
    matches = _NUMBER.findall(text.translate(_MINUS))
    if not matches:
        return None
    return matches[-1].replace(",", "")


def extract(text: str) -> Extraction | None:
    """The final answer of `text` and the rule that found it, else None (see module doc)."""
    if not isinstance(text, str):
        raise TypeError(f"expected the model's text as str, got {type(text).__name__}")
    boxed = last_boxed(text)
    if boxed is not None:
        return Extraction(boxed, "boxed")
    phrase = last_answer_phrase(text)
    if phrase is not None:
        return Extraction(phrase, "answer")
    number = last_number(text)
    if number is not None:
        return Extraction(number, "number")
    return None


def extract_answer(text: str) -> str | None:
    """Only the answer string of `extract(text)`."""
    found = extract(text)
    return None if found is None else found.text


# A whole string that is one plain number, maybe with a currency sign or in $...$.
_PLAIN_NUMBER = re.compile(
    r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?$|^[+-]?(?:\d+(?:\.\d*)?|\.\d+)[eE][+-]?\d+$"
    r"|^[+-]?\.\d+$"
)
_HEX_NUMBER = re.compile(r"^[+-]?0[xX][0-9a-fA-F]+$")


def parse_number(text: str | None) -> Decimal | None:
    """`text` as an exact Decimal if it is nothing but a number, else None.

    Accepts surrounding whitespace, `$...$` math delimiters, a leading currency `$` / `\\$`,
    thousands separators, unicode minus signs, scientific notation and hexadecimal integers:
    "$1,234$", "\\$5", "-0.5", " 3. ", "4.5927e+01", "-0x3f".
    Anything else (units, %, LaTeX, text) is None and goes to the symbolic checker.
    """
    if text is None:
        return None
    s = text.translate(_MINUS).strip()
    if len(s) >= 2 and s.startswith("$") and s.endswith("$"):
        s = s[1:-1].strip()
    for prefix in ("\\$", "$"):
        if s.startswith(prefix):
            s = s[len(prefix):].strip()
    s = s.replace(" ", "") if re.fullmatch(r"[+-]\s+\d[\d,.]*", s) else s
    if _HEX_NUMBER.match(s):  # its value: "0x217e" == "8574"; math-verify would read 0 * x * ...
        return Decimal(int(s, 16))
    if not _PLAIN_NUMBER.match(s):
        return None
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        return None
