"""The web surface: server-rendered pages over the core (Jinja2, a little vanilla JavaScript)."""
