"""The MCP App document, from the web pages' templates and static files.

A host renders the App from the resource text in a sandboxed iframe, so the document is
self-contained: the stylesheet and the scripts of ``static/`` are inlined (the App has no server
to fetch them from). The data arrives from the host by postMessage (``static/app.js``).
"""

from __future__ import annotations

from server.web.render import STATIC, render


def app_html() -> str:
    """The App's HTML, with ``lens.css``, ``heatmap.js`` and ``app.js`` inlined."""
    parts = {
        name: (STATIC / name).read_text(encoding="utf-8") for name in ("lens.css", "heatmap.js", "app.js")
    }
    for name, text in parts.items():
        if "</" in text:
            raise ValueError(f"static/{name} holds '</', which would end the inlined element early")
    return render("app.html", css=parts["lens.css"], scripts=[parts["heatmap.js"], parts["app.js"]])
