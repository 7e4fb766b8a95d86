"""Argument errors in plain words: ``limit must be between 1 and 100, got 0`` instead of pydantic's
multi-line report (``1 validation error for list_tracesArguments ... [type=greater_than_equal,
input_value=0 ...] For further information visit https://errors.pydantic.dev/...``).

``plain_argument_errors(mcp)`` runs once after every tool is registered: each tool answers its
argument errors through ``PlainWordsTool.run``, which rewords the SDK's validation failure and
leaves every other error as it is. Bounds come from the argument's own constraints, so a message
always states the full range the schema advertises.
"""

from __future__ import annotations

from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from pydantic import BaseModel, ValidationError


def _bounds(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    field = model.model_fields.get(name)
    lo: Any = None
    hi: Any = None
    for m in field.metadata if field is not None else []:
        if isinstance(m, Ge):
            lo = m.ge
        elif isinstance(m, Gt):
            lo = m.gt
        elif isinstance(m, Le):
            hi = m.le
        elif isinstance(m, Lt):
            hi = m.lt
    return lo, hi


def _lengths(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    field = model.model_fields.get(name)
    lo = hi = None
    for m in field.metadata if field is not None else []:
        if isinstance(m, MinLen):
            lo = m.min_length
        elif isinstance(m, MaxLen):
            hi = m.max_length
    return lo, hi


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(exc: ValidationError, model: type[BaseModel]) -> str:
    """One sentence per invalid argument, naming it, what it must be and what was given."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = [str(x) for x in err["loc"]]
        name = loc[0] if loc else "arguments"
        where = name + "".join(f"[{x}]" if x.isdigit() else f".{x}" for x in loc[1:])
        kind, given, ctx = err["type"], err.get("input"), err.get("ctx") or {}
        if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
            lo, hi = _bounds(model, name) if len(loc) == 1 else (ctx.get("ge"), ctx.get("le"))
            if lo is not None and hi is not None:
                rule = f"must be between {lo} and {hi}"
            elif lo is not None:
                rule = f"must be at least {lo}"
            else:
                rule = f"must be at most {hi}"
            parts.append(f"{where} {rule}, got {_shown(given)}")
        elif kind in ("string_too_long", "too_long", "string_too_short", "too_short"):
            lo, hi = _lengths(model, name)
            unit = "characters" if kind.startswith("string") else "items"
            if "short" in kind and lo == 1:
                parts.append(f"{where} must not be empty")
                continue
            rule = f"at most {hi} {unit}" if "long" in kind else f"at least {lo} {unit}"
            size = len(given) if hasattr(given, "__len__") else "?"
            parts.append(f"{where} must have {rule}, got {size}")
        elif kind == "missing":
            parts.append(f"{where} is required")
        elif kind == "literal_error":
            parts.append(f"{where} must be one of {ctx.get('expected', '?')}, got {_shown(given)}")
        elif kind == "extra_forbidden":
            parts.append(f"unknown argument {where}")
        elif kind in ("int_parsing", "int_type", "int_from_float"):
            parts.append(f"{where} must be a whole number, got {_shown(given)}")
        elif kind in ("bool_parsing", "bool_type"):
            parts.append(f"{where} must be true or false, got {_shown(given)}")
        elif kind in ("string_type",):
            parts.append(f"{where} must be a string, got {_shown(given)}")
        elif kind in ("list_type",):
            parts.append(f"{where} must be a list, got {_shown(given)}")
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
            parts.append(f"{where}: {msg[:1].lower()}{msg[1:]}, got {_shown(given)}")
    return "; ".join(parts)


class PlainWordsTool(Tool):
    """A registered tool whose argument errors are worded by ``describe``."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError) and str(exc).startswith(
                f"Error executing tool {self.name}: "
            ):
                words = describe(exc.__cause__, self.fn_metadata.arg_model)
                raise ToolError(f"Error executing tool {self.name}: {words}") from exc.__cause__
            raise


def plain_argument_errors(mcp: MCPServer[Any]) -> None:
    """Make every registered tool word its argument errors plainly (call after registering)."""
    for tool in mcp._tool_manager.list_tools():
        if type(tool) is Tool:
            tool.__class__ = PlainWordsTool
