"""ConfigError, and pydantic's ValidationError turned into one ConfigError that names the
dotted key (`train.steps must be an integer, got str 'x'`; unknown keys with the known ones)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union

from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A config value is missing, unknown or of the wrong type; the message names its key.

    The message is kept on one line (a library's multi-line text folded into it): the command
    line prints a ConfigError as one line on stderr, the whole answer to a bad config."""

    def __init__(self, message: Any = "", *args: Any) -> None:
        if isinstance(message, str):
            message = " ".join(part.strip() for part in message.splitlines() if part.strip())
        super().__init__(message, *args)


def _declared(tp: Any) -> Any:
    """A declared type without its pydantic metadata (Annotated) and without Optional."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (Union, types.UnionType):
        non_none = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(non_none) == 1:
            return _declared(non_none[0])
    return tp


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _error_key(cls: Any, loc: Sequence[Any]) -> tuple[str, Any, tuple[str, Any, int] | None]:
    """A pydantic error location as a dotted key (`train.adam_betas[1]`, `agents.solver.policy`),
    the type declared there, and (key, type, position in loc) of the union of several types it
    went through, if any (pydantic puts the tag of the member tried under it, not in the key)."""
    key, tp, union = "", cls, None
    for i, part in enumerate(loc):
        tp = _declared(tp)
        if union is None and typing.get_origin(tp) in (Union, types.UnionType):
            union, tp = (key, tp, i), Any  # `part` is the member's tag
            continue
        if isinstance(part, int) and (tp is Any or typing.get_origin(tp) is list):
            key += f"[{part}]"
        else:
            key += f".{part}" if key else str(part)
        if _is_section(tp):
            field = tp.model_fields.get(str(part))
            tp = field.annotation if field is not None else Any
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        elif typing.get_origin(tp) is list:
            tp = typing.get_args(tp)[0]
        else:
            tp = Any
    return key, _declared(tp), union


# pydantic's type errors (strict mode) -> what the value must be
_MUST_BE = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
}


def _error_message(cls: Any, error: Mapping[str, Any]) -> str:
    """One pydantic error as a sentence that names its dotted key."""
    loc, kind, value = error["loc"], error["type"], error.get("input")
    if loc and loc[-1] == "[key]":  # a key of a mapping field
        return f"{_error_key(cls, loc[:-2])[0]}: keys must be strings, got {loc[-2]!r}"
    key = _error_key(cls, loc)[0] or cls.__name__
    if kind in ("value_error", "assertion_error"):
        raised = error.get("ctx", {}).get("error")
        if isinstance(raised, ConfigError):
            return str(raised)  # a section's own rule: its message names the key already
        return f"{key}: {raised if raised is not None else error['msg']}"
    if kind == "bool_type":
        return f"{key} must be true or false, got {value!r}"
    if kind in ("model_type", "model_attributes_type"):
        return f"{key} must be a mapping (section {error['ctx']['class_name']}), got {value!r}"
    if kind == "finite_number":
        return f"{key} must be a finite number, got {value!r}"
    if kind in _MUST_BE:
        return f"{key} must be {_MUST_BE[kind]}, got {type(value).__name__} {value!r}"
    return f"{key}: {error['msg']}"


def config_error(cls: Any, e: ValidationError) -> ConfigError:
    """pydantic's ValidationError as one ConfigError naming the dotted key. Unknown keys come
    first (all those of the first section that has some, with its known keys), else the first
    error; a value that matches no member of a union lists why for each member."""
    errors = e.errors(include_url=False)
    unknown = [err for err in errors if err["type"] == "extra_forbidden"]
    if unknown:
        parent = unknown[0]["loc"][:-1]
        where, section, _ = _error_key(cls, parent)
        names = sorted(f"{where}.{err['loc'][-1]}" if where else str(err["loc"][-1])
                       for err in unknown if err["loc"][:-1] == parent)
        known = sorted(section.model_fields)
        return ConfigError(
            f"unknown key(s) {names}; known keys{' of ' + where if where else ''}: {known}"
        )
    union = _error_key(cls, errors[0]["loc"])[2]
    if union is None:
        return ConfigError(_error_message(cls, errors[0]))
    key, tp, at = union
    members = [err for err in errors if _error_key(cls, err["loc"])[2] == union]
    # the value given: the input of an error of a member itself (not of an item below it)
    value = next((err["input"] for err in members if len(err["loc"]) == at + 1), members[0]["input"])
    if value is None:
        return ConfigError(f"{key} must not be null")
    names = " | ".join(str(a).replace("typing.", "") if typing.get_origin(a) else a.__name__
                       for a in map(_declared, typing.get_args(tp)))
    reasons = "; ".join(_error_message(cls, err) for err in members)
    return ConfigError(f"{key}: {value!r} matches none of {names} ({reasons})")
