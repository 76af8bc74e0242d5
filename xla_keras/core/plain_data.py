"""Plain data in and out, checked. Pure.

- **Arguments** as users pass them: Keras accepts numpy integers where an int is meant and
  ``pathlib.Path`` (or ``~``) where a directory is meant, and so do the public entry points.
- **Records** as their JSON holds them: a dataclass's JSON form derived from its fields, read back by
  key, and which of its fields are numbers (what a reader of a hand-written or damaged JSON file
  checks). A record declares its fields once; ``to_dict``, ``from_dict`` and the XLA tab's checks
  follow them, so a new field is one line in the dataclass (and its docstring), not an edit in each.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import typing
from typing import Any, Callable, Dict, Iterator, NamedTuple, Optional, Tuple, Union


def integer(value: Any) -> Optional[int]:
    """``value`` as an int if it is an integer (numpy ones included, bool
    excluded), else None."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return None


def number(value: Any) -> Optional[float]:
    """``value`` as a float if it is a finite number (numpy ones and numeric strings included, bool
    excluded), else None."""
    if isinstance(value, bool):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if result == result and abs(result) != float("inf") else None


def directory(value: Any, name: str) -> Optional[str]:
    """A directory argument as a str path (``~`` expanded), or None."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str, an os.PathLike (e.g. pathlib.Path) or None; got {type(value).__name__}")
    path = os.fspath(value)
    if isinstance(path, bytes) or not path:
        raise ValueError(f"{name} must be a non-empty directory path or None; got {value!r}")
    return os.path.expanduser(path)


# Field metadata: how a field's value is written (default: ``plain``), and whether a None is left out
# of the JSON (a key that a record of that kind holds only when it has a value).
TO_JSON = "to_json"
FROM_JSON = "from_json"  # how a field's JSON value is read back (default: as it is); a None stays None
OMIT_NONE = "omit_none"


def converters(to_json: Callable[[Any], Any], from_json: Callable[[Any], Any]) -> Dict[str, Any]:
    """The metadata of a dataclass field whose JSON form is not its value (``field(metadata=...)``):
    ``to_json`` writes it, ``from_json`` reads it."""
    return {TO_JSON: to_json, FROM_JSON: from_json}


_SCALARS = (str, int, float, bool, type(None))


def plain(value: Any) -> Any:
    """``value`` as JSON-able data: a record through its ``to_dict()``, containers copied through."""
    if isinstance(value, _SCALARS):  # most values: checked first (a report is written at every flush)
        return value
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def record_dict(record: Any) -> Dict[str, Any]:
    """A dataclass record as plain data, key by key in field order (``TO_JSON`` and ``OMIT_NONE``
    metadata honoured)."""
    out: Dict[str, Any] = {}
    for name, convert, omit_none in _writers(type(record)):
        value = getattr(record, name)
        if value is None and omit_none:
            continue
        out[name] = convert(value)
    return out


_Writers = Tuple[Tuple[str, Callable[[Any], Any], bool], ...]
_WRITERS: Dict[type, _Writers] = {}


def _writers(cls: type) -> _Writers:
    """Each field of the dataclass ``cls``: its name, how its value is written, whether a None is left out
    (read once per class: ``dataclasses.fields`` costs more than the record's own values)."""
    if cls not in _WRITERS:
        _WRITERS[cls] = tuple(
            (f.name, f.metadata.get(TO_JSON, plain), bool(f.metadata.get(OMIT_NONE))) for f in dataclasses.fields(cls)
        )
    return _WRITERS[cls]


def known_fields(cls: Any, data: Any) -> dict:
    """The items of ``data`` that are fields of the dataclass ``cls``: a record read back by key, never
    by position, unknown keys (a newer schema's) ignored."""
    readers = _readers(cls)
    return {k: v for k, v in data.items() if k in readers}


def record_from_dict(cls: Any, data: Any) -> Any:
    """The dataclass record ``cls`` read back from ``record_dict``'s form: by key (``known_fields``),
    each ``FROM_JSON`` field converted, missing ones taking their defaults."""
    known = known_fields(cls, data)
    for name, convert in _readers(cls).items():
        if convert is not None and known.get(name) is not None:
            known[name] = convert(known[name])
    return cls(**known)


_READERS: Dict[type, Dict[str, Optional[Callable[[Any], Any]]]] = {}


def _readers(cls: type) -> Dict[str, Optional[Callable[[Any], Any]]]:
    """Each field of the dataclass ``cls`` by name, with how its JSON value is read (None: as it is). From
    ``dataclasses.fields``, not ``__dataclass_fields__``, which holds ClassVars too; read once per class."""
    if cls not in _READERS:
        _READERS[cls] = {f.name: f.metadata.get(FROM_JSON) for f in dataclasses.fields(cls)}
    return _READERS[cls]


_NUMBER_TYPES = (int, float)


class NumberField(NamedTuple):
    """A field that holds a number, or a dict of numbers by key (``keyed``: per phase, per mode)."""

    name: str
    optional: bool  # may be missing or None: it has a default (older reports lack it) or is Optional
    keyed: bool


def _numbers(hint: Any) -> Optional[bool]:
    """Whether ``hint`` is a number type (int or float): None if not, else whether it is Optional."""
    kinds = typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,)
    numeric = [k for k in kinds if k is not type(None)]
    if numeric and all(k in _NUMBER_TYPES for k in numeric):
        return type(None) in kinds
    return None


def number_fields(cls: Any) -> Iterator[NumberField]:
    """The fields of the dataclass ``cls`` that hold a number (int or float, optional or not) or a dict of
    them: what a reader of a hand-written or damaged JSON file checks before drawing it."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        keyed = typing.get_origin(hint) is dict
        optional = _numbers(typing.get_args(hint)[1] if keyed else hint)
        if optional is None:
            continue
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        yield NumberField(f.name, optional or (has_default and not keyed), keyed)
