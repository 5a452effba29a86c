"""JSON Lines that hold any text a model can generate: one writer and one reader for every
JSONL file srpo writes (metrics, episodes, rollouts, corpora, study records).

    line = dumps_line(record)            # one line, ending in "\\n", safe for any reader
    records = loads_lines(text, where)   # the records of a whole file's text, in order

Why not `json.dumps(..., ensure_ascii=False)` and `str.splitlines()`: JSON escapes the control
characters below U+0020 but leaves U+0085 (NEXT LINE), U+2028 (LINE SEPARATOR) and U+2029
(PARAGRAPH SEPARATOR) raw, and `str.splitlines()` splits on all three, so a generated character
cut one record into two invalid lines. A lone surrogate (U+D800-U+DFFF on its own) is a valid
Python string and a valid JSON escape, but cannot be encoded as UTF-8, so writing it raw fails.
`dumps_line` writes these characters as `\\uXXXX` escapes (everything else stays readable UTF-8)
and `loads_lines` splits on "\\n" only; `json.loads` turns the escapes back into the same
characters, so every string round-trips (two lone surrogates that happen to form a pair come
back as the one character they encode, as any JSON reader does).
"""

from __future__ import annotations

import json
import re
from typing import Any

# What JSON leaves raw that a line-oriented or UTF-8 reader cannot take: the characters
# str.splitlines() breaks at beyond "\n" / "\r" (which JSON escapes), and lone surrogates.
_UNSAFE = re.compile("[\x85\u2028\u2029\ud800-\udfff]")


def escape_unsafe(text: str) -> str:
    """`text` (JSON produced with ensure_ascii=False) with U+0085, U+2028, U+2029 and lone
    surrogates as \\uXXXX escapes. Valid because json.dumps emits them only inside strings."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps_line(record: Any, **kwargs: Any) -> str:
    """`record` as one JSON line with its newline. NaN and inf are refused (JSON has none);
    kwargs go to json.dumps (e.g. `default=str`)."""
    kwargs.setdefault("allow_nan", False)
    return escape_unsafe(json.dumps(record, ensure_ascii=False, **kwargs)) + "\n"


def split_lines(text: str) -> tuple[list[str], str]:
    """(complete lines, text after the last newline). Only "\\n" ends a line: a file written by
    an older srpo may hold raw U+2028 etc. inside a string, and those must not split it."""
    *lines, tail = text.split("\n")
    return lines, tail


def loads_lines(text: str, where: str = "JSONL") -> list[Any]:
    """The records of a JSONL text, in order; blank lines are skipped. A line that is not JSON
    raises ValueError naming `where` and the line number."""
    lines, tail = split_lines(text)
    if tail.strip():
        lines.append(tail)
    out = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as e:
            raise ValueError(f"{where}: line {i} is not valid JSON ({e}): {line[:80]!r}") from None
    return out
