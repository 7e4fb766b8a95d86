"""Smaller ``tools/list``: pydantic's schemas carry a ``title`` on every model and property
(``"title": "Slowdown"`` beside ``"slowdown"``), about a fifth of the listing, which every
assistant pays for in context on every session. ``slim_schemas(mcp)`` drops those annotation
titles from each tool's input and output schema after registration, and the result models'
docstrings from output schemas; it never touches a property that is *named* ``title`` (an
incident has one), nor anything a validator reads.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer

# keywords whose value maps names to sub-schemas, or is one sub-schema, or a list of them
_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")


def slim(schema: Any) -> Any:
    """``schema`` without annotation ``title`` keywords (a copy; the input is unchanged)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _MAPS and isinstance(value, dict):
            out[key] = {name: slim(sub) for name, sub in value.items()}
        elif key in _ONE:
            out[key] = slim(value)
        elif key in _MANY and isinstance(value, list):
            out[key] = [slim(sub) for sub in value]
        else:
            out[key] = value
    return out


# Output properties described by another tool's schema: (tool, property) -> the tool that has it.
# diagnose embeds the what-if report run_whatif already publishes in full (about 12 kB).
SEE_ALSO = {("diagnose", "report"): "run_whatif"}


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found.add(ref.removeprefix("#/$defs/"))
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def prune_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without the ``$defs`` nothing refers to any more (transitively)."""
    defs = schema.get("$defs")
    if not defs:
        return schema
    keep: set[str] = set()
    _refs({k: v for k, v in schema.items() if k != "$defs"}, keep)
    todo = list(keep)
    while todo:
        found: set[str] = set()
        _refs(defs.get(todo.pop()), found)
        todo += sorted(found - keep)
        keep |= found
    out = {k: v for k, v in schema.items() if k != "$defs"}
    if keep:
        out["$defs"] = {k: v for k, v in defs.items() if k in keep}
    return out


def _see_also(tool: str, schema: dict[str, Any]) -> dict[str, Any]:
    props = dict(schema.get("properties") or {})
    changed = False
    for (name, prop), other in SEE_ALSO.items():
        if name == tool and prop in props:
            description = props[prop].get("description", "")
            props[prop] = {
                "type": "object",
                "description": f"{description} (its schema: the `{prop}` of {other}'s output schema)".strip(),
            }
            changed = True
    return prune_defs({**schema, "properties": props}) if changed else schema


def without_model_docs(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema without the models' own descriptions (pydantic puts each result class's
    docstring on its schema: written for developers, repeated in every tool that returns the model,
    a quarter of ``tools/list``). Property descriptions, which say what a field means, stay."""
    out = {k: v for k, v in schema.items() if k != "description"}
    defs = schema.get("$defs")
    if isinstance(defs, dict):
        out["$defs"] = {
            name: {k: v for k, v in sub.items() if k != "description"} if isinstance(sub, dict) else sub
            for name, sub in defs.items()
        }
    return out


def slim_schemas(mcp: MCPServer[Any]) -> None:
    """Drop annotation titles from every registered tool's schemas and the models' docstrings
    from output schemas, and publish a part another tool already describes once (``SEE_ALSO``);
    call after registering."""
    for tool in mcp._tool_manager.list_tools():
        tool.parameters = slim(tool.parameters)
        if tool.fn_metadata.output_schema is not None:
            output = without_model_docs(slim(tool.fn_metadata.output_schema))
            tool.fn_metadata.output_schema = _see_also(tool.name, output)
