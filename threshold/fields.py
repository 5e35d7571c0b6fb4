"""Checks on the fields of a settings dataclass, shared by every layer's settings: a number is
finite (:func:`check_finite`), a value has its field's kind, read off its annotation
(:func:`field_kind`, :func:`checked_field`). No settings of its own: the search's settings use
it without the task's, which :mod:`threshold.config` holds."""

from __future__ import annotations

import math
from dataclasses import fields

from threshold.errors import ConfigError

__all__ = ["check_finite", "checked_field", "field_kind"]


def check_finite(settings) -> None:
    """Refuse an infinite or NaN number in any field of the dataclass ``settings`` (alone or in a
    tuple): ``inf`` passes every range check that only has a lower bound (``lr > 0``)."""
    for f in fields(settings):
        value = getattr(settings, f.name)
        values = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise ConfigError(f"{f.name} {value} is not allowed: give a finite number", f.name)


_KINDS = {"int": int, "float": float, "bool": bool, "str": str}


def field_kind(cls, key: str) -> tuple[type | None, bool]:
    """The kind of field ``key`` of dataclass ``cls``, read off its annotation, and whether the
    field is a tuple of that kind: ``int | None`` is (int, False), ``tuple[float, ...]`` (float,
    True); None for a kind it does not name (a nested dataclass, a tuple of pairs)."""
    text = next(f.type for f in fields(cls) if f.name == key).removesuffix(" | None")
    listed = text.startswith("tuple[")
    name = text.removeprefix("tuple[").split(",")[0].rstrip("]") if listed else text
    return _KINDS.get(name), listed


def checked_field(cls, key: str, value):
    """``value`` if its kind fits field ``key`` of dataclass ``cls`` (:func:`field_kind`: an int
    where a float goes, a list of numbers where a tuple goes, as TOML and JSON give them), a
    list as a tuple; else a one-line ConfigError naming it."""
    kind, listed = field_kind(cls, key)
    if listed and isinstance(value, list | tuple):
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            return tuple(value)
    elif kind is not None and not listed:
        allowed = (int, float) if kind is float else (kind,)
        if isinstance(value, allowed) and (kind is bool or not isinstance(value, bool)):
            return value
    annotation = next(f.type for f in fields(cls) if f.name == key)
    raise ConfigError(f"{key} {value!r} is not allowed: give a value of type {annotation}", key)
