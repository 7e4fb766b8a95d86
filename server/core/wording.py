"""Messages in the caller's own terms.

The readers and the job model word their errors for the CLI (``pass --format kineto``,
``check --dp/--pp``) and, for options the CLI lacks, for Python (``ReadOptions(extra=...)``).
A surface rewrites them into its own argument names before a caller reads them: an MCP tool's
argument (``format="kineto"``, ``partial=true``) or a REST query / form field (``format=kineto``).
Operator options (``--max-upload-mb``, ``--allow-dir``) stay as they are: they are the server's
command line, which the caller may ask an operator to change.
"""

from __future__ import annotations

import functools
import re
from typing import Literal

Surface = Literal["mcp", "rest"]

# the CLI's reading options, which both surfaces take under these argument names; a value is
# taken along only where it is one (a reader name after --format, a number after a size)
_READ_FLAGS = re.compile(r"--(format|dp|pp|tp|cp|vpp|gpus-per-host|layers-per-stage)\b( ([\w.,-]+))?")
_PARTIAL = re.compile(r"ReadOptions\(extra=\{'partial': True\}\)")
_META = re.compile(r"--meta\b")


def in_terms(message: str, surface: Surface) -> str:
    """``message`` with the CLI's reading flags and Python-only options named as ``surface``'s
    arguments."""

    def flag(m: re.Match[str]) -> str:
        name = m.group(1).replace("-", "_")
        value = m.group(3)
        if value is None or not _is_value(name, value):
            return name + (m.group(2) or "")
        if surface == "mcp" and name == "format":
            return f'{name}="{value}"'
        return f"{name}={value}"

    out = _PARTIAL.sub("partial=true", message)
    out = _META.sub("a meta .yaml among the files", out)
    out = _READ_FLAGS.sub(flag, out)
    out = re.sub(r"\bpass (format|dp|pp|tp|cp|vpp|gpus_per_host|layers_per_stage)\b", r"give \1", out)
    return out.replace("drop format", "leave out format")


@functools.cache
def _format_names() -> frozenset[str]:
    from diagnosers.readers import available_readers

    names: set[str] = set()
    for module in available_readers().values():
        names.update(getattr(module, "FORMAT_NAMES", ()))
    return frozenset(names)


def _is_value(name: str, value: str) -> bool:
    if name == "format":
        return value in _format_names()
    return bool(re.fullmatch(r"\d+(,\d+)*", value))
