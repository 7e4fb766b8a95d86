"""The Jinja2 environment of the web pages and the MCP App (one set of templates).

Autoescaping is on for every template. Pages get a strict Content-Security-Policy: scripts and
styles only from this server's ``/static/`` files, no inline script or style, no framing. The MCP
App is one self-contained document (hosts render it in a sandboxed iframe from the resource
text), so it carries the same static files inline.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

HERE = Path(__file__).parent
STATIC = HERE / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def fmt(value: Any, digits: int = 3) -> str:
    """A number with ``digits`` decimals; 'unknown' for None."""
    if value is None:
        return "unknown"
    try:
        return f"{float(value):.{digits}f}"
    except (TypeError, ValueError):
        return str(value)


def label(value: Any) -> str:
    """An enum's value (or the value itself); 'unknown' for None."""
    if value is None:
        return "unknown"
    return str(getattr(value, "value", value))


def web_url(value: Any) -> str:
    """``value`` when it is an http(s) URL, else '#': data never chooses a link's scheme."""
    text = str(value or "")
    return text if text.startswith(("https://", "http://")) else "#"


@lru_cache(maxsize=1)
def env() -> Environment:
    e = Environment(
        loader=FileSystemLoader(str(HERE / "templates")),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    e.filters["num"] = fmt
    e.filters["label"] = label
    e.filters["web_url"] = web_url
    e.globals["static_text"] = lambda name: (STATIC / name).read_text(encoding="utf-8")
    return e


def render(name: str, **context: Any) -> str:
    return env().get_template(name).render(**context)
