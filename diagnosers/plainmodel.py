"""Plain dataclasses that pydantic validates and describes, without importing it until needed.

The diagnosis's small value types (``Location``, ``Pattern``, ``CauseMatch``, ``Remedy``) are built on
every path, the CLI's included, where importing pydantic costs more than the diagnosis of a small
job. They are dataclasses that pydantic validates as fields of the models that hold them and
describes with the JSON schema they had as models (field metadata: bounds, descriptions; the
class's ``__pydantic_config__``: no extra keys). A constructor given values already of their
fields' types keeps them as they are; any other value goes through pydantic's validation of the
class (:func:`pydantic_checked`), so conversions and error messages are pydantic's, as for
``diagnosers.model.JobMeta``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from contextvars import ContextVar
from enum import Enum
from typing import Any, Self

# set while pydantic validates a value of one of these classes: the instances it builds have
# validated fields, and a rule's ValueError raised then becomes pydantic's ValidationError
_VALIDATING: ContextVar[bool] = ContextVar("plainmodel_validating", default=False)


def validating() -> bool:
    """Whether pydantic is building the instance being initialised (its fields are validated)."""
    return _VALIDATING.get()


_ADAPTERS: dict[type, Any] = {}


def _adapter(cls: type) -> Any:
    """pydantic's ``TypeAdapter`` of ``cls``, built once."""
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def pydantic_checked(obj: Any) -> None:
    """Replace ``obj``'s fields by pydantic's validation of them: its conversions, or its
    ``ValidationError`` naming the field."""
    given = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    token = _VALIDATING.set(True)
    try:
        checked = _adapter(type(obj)).validate_python(given)
    finally:
        _VALIDATING.reset(token)
    obj.__dict__.update(checked.__dict__)


def dump(value: Any, json: bool) -> Any:
    """``value`` as pydantic's ``model_dump`` gives it: dataclasses as dicts (field order), enums
    as their values in JSON mode, containers copied."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name), json) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value if json else value
    if isinstance(value, list):
        return [dump(v, json) for v in value]
    if isinstance(value, tuple):
        return [dump(v, json) for v in value] if json else tuple(dump(v, json) for v in value)
    if isinstance(value, dict):
        return {k: dump(v, json) for k, v in value.items()}
    return value


class PlainModel:
    """The pydantic model methods the callers of these value types use."""

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        """The fields as a dict (nested values too; enums as values with ``mode="json"``)."""
        out: dict[str, Any] = dump(self, mode == "json")
        return out

    def model_dump_json(self, indent: int | None = None) -> str:
        """The fields as pydantic's JSON text of the model (:func:`json_text`)."""
        return json_text(self.model_dump(mode="json"), indent)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A copy with ``update``'s fields replaced (validated like a new instance)."""
        return dataclasses.replace(self, **dict(update or {}))  # type: ignore[type-var]

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        """An instance from a mapping (or an instance), validated by pydantic."""
        if isinstance(data, cls):
            return data
        token = _VALIDATING.set(True)
        try:
            out: Self = _adapter(cls).validate_python(data)
        finally:
            _VALIDATING.reset(token)
        return out

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> Self:
        """An instance from JSON text, validated by pydantic."""
        token = _VALIDATING.set(True)
        try:
            out: Self = _adapter(cls).validate_json(text)
        finally:
            _VALIDATING.reset(token)
        return out

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        """The JSON schema pydantic gives the class (as when it was a model)."""
        out: dict[str, Any] = _adapter(cls).json_schema()
        return out


# a JSON string (skipped as it is) or a number in Python's exponent form with a negative exponent
_STRING_OR_SMALL_FLOAT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(-?)(\d(?:\.\d+)?)e-(\d+)')


# In indented text (``indent`` not None) every value is on a line of its own: a number ends its
# line (or its ``,`` does), a string never does (its closing quote follows it, and a line break
# inside a string is written escaped). So a small float there is a negative exponent at the end of
# a line, after a mantissa that starts the line or follows a space: found by searching for the
# exponent, a literal, instead of scanning every string of the text.
_EXPONENT_AT_LINE_END = re.compile(r"e-(\d+)(?=,?$)", re.MULTILINE)
_MANTISSA = re.compile(r"(-?)(\d(?:\.\d+)?)")


def _as_pydantic_float(m: re.Match[str]) -> str:
    """A number of the form ``[-]d[.ddd]e-XX`` as pydantic writes it: positional at exponent -5
    (``0.000025``), else without the exponent's leading zero (``1.5e-7``)."""
    if m.group(2) is None:
        return m.group(0)
    return _pydantic_small_float(m.group(1), m.group(2), int(m.group(3)))


def _pydantic_small_float(sign: str, mantissa: str, exponent: int) -> str:
    if exponent == 5:
        return f"{sign}0.0000{mantissa.replace('.', '')}"
    return f"{sign}{mantissa}e-{exponent}"


def _small_floats_of_lines(text: str) -> str:
    """``_STRING_OR_SMALL_FLOAT.sub(_as_pydantic_float, text)`` for indented JSON text (see
    ``_EXPONENT_AT_LINE_END``): the same numbers rewritten, the strings left as they are."""
    parts: list[str] = []
    last = 0
    for m in _EXPONENT_AT_LINE_END.finditer(text):
        at = m.start()
        begin = max(text.rfind(" ", 0, at), text.rfind("\n", 0, at)) + 1
        number = _MANTISSA.fullmatch(text, begin, at)
        if number is None:
            continue
        parts += [text[last:begin], _pydantic_small_float(number.group(1), number.group(2), int(m.group(1)))]
        last = m.end()
    parts.append(text[last:])
    return "".join(parts)


def json_text(document: Any, indent: int | None = 2) -> str:
    """``document`` (JSON values only) as the text pydantic's ``model_dump_json(indent=indent)``
    gives the model it is the dump of (``indent=None``: no whitespace at all, as pydantic's).

    ``json.dumps`` writes the same structure, separators, escapes (with ``ensure_ascii=False``)
    and numbers, except floats below 1e-4: Python writes ``2.5e-05`` and ``1.5e-07``, pydantic
    ``0.000025`` and ``1.5e-7``; those are rewritten outside strings."""
    separators = (",", ": ") if indent is not None else (",", ":")
    text = json.dumps(document, indent=indent, ensure_ascii=False, separators=separators)
    if indent is not None:
        return _small_floats_of_lines(text)
    return _STRING_OR_SMALL_FLOAT.sub(_as_pydantic_float, text)
