"""Security on every route: Host and Origin validation, the bearer token, server-side path checks.

The MCP SDK validates Host/Origin for ``/mcp`` only (MCP-SDK.md §1.10), so this middleware wraps
the whole Starlette app and refuses a request before any route sees it. Refusals use the one JSON
error shape of ``server.core.errors``.
"""

from __future__ import annotations

import hashlib
import hmac
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from server.core.errors import error_response
from server.core.settings import LOOPBACK_HOSTS, Settings

# The web pages' login cookie. Its value is derived from the token (an HMAC), so the token itself
# never sits in a browser's cookie jar, and a new token file logs every browser out.
SESSION_COOKIE = "lens_session"
# Paths that answer JSON (a refusal is a 401 body); every other path is a page (a refusal sends the
# browser to the login form). The login form and its static files are reachable without a token.
API_PREFIXES = ("/api", "/mcp", "/healthz")
PUBLIC_PREFIXES = ("/login", "/static/")
SAFE_METHODS = ("GET", "HEAD")


def session_value(token: str) -> str:
    """The login cookie's value for ``token``."""
    return hmac.new(token.encode(), b"straggler-lens web session", hashlib.sha256).hexdigest()


def session_cookie(token: str, secure: bool) -> str:
    """A ``Set-Cookie`` value: HttpOnly (no script reads it), SameSite=Strict (no other site's
    page sends it), path /, for the browser session only."""
    flags = "; Secure" if secure else ""
    return f"{SESSION_COOKIE}={session_value(token)}; HttpOnly; SameSite=Strict; Path=/{flags}"


def split_host(value: str) -> tuple[str, str | None]:
    """``"name:port"`` / ``"[v6]:port"`` / ``"name"`` -> (name, port); IPv6 names keep brackets."""
    if value.startswith("["):
        end = value.find("]")
        if end == -1:
            return value, None
        name, rest = value[: end + 1], value[end + 1 :]
        return name, rest[1:] if rest.startswith(":") else None
    if value.count(":") == 1:
        name, port = value.split(":")
        return name, port
    return value, None

# Routes authenticated by a chat platform's request signature, not by the bearer token.
SIGNED_PATHS = ("/api/chat/",)


class HostPolicy:
    """Which Host and Origin header values are accepted: loopback names plus ``--allowed-host``.

    An ``--allowed-host`` given with a port (``lens.example:8443``) allows exactly that port;
    without one, any port. Origins must be http(s) URLs naming an allowed host.
    """

    def __init__(self, settings: Settings):
        self.any_port: set[str] = {name.lower() for name in LOOPBACK_HOSTS}
        self.exact: set[str] = set()
        for h in settings.allowed_hosts:
            name, port = split_host(h.lower())
            if port is None:
                self.any_port.add(name)
            else:
                self.exact.add(f"{name}:{port}")

    def host_ok(self, host: str | None) -> bool:
        """Case-insensitive (RFC 9110: host names are); a port must be digits, so
        ``localhost:80@evil.com`` and other userinfo tricks are refused."""
        if not host or "@" in host:
            return False
        host = host.lower()
        name, port = split_host(host)
        if port is not None and not (port.isascii() and port.isdigit()):
            return False
        if host in self.exact:
            return True
        return name in self.any_port

    def origin_ok(self, origin: str) -> bool:
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        return self.host_ok(parts.netloc)

    def transport_security(self) -> TransportSecuritySettings:
        """The same allowlist in the SDK's terms, so ``/mcp`` agrees with the outer middleware."""
        hosts: list[str] = []
        origins: list[str] = []
        for name in sorted(self.any_port):
            hosts += [name, f"{name}:*"]
            origins += [f"{s}://{name}{p}" for s in ("http", "https") for p in ("", ":*")]
        for exact in sorted(self.exact):
            hosts.append(exact)
            origins += [f"http://{exact}", f"https://{exact}"]
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        )


class SecurityMiddleware:
    """Refuse requests with a foreign Host (421) or Origin (403), or without the bearer token (401).

    A missing Origin is allowed (non-browser clients send none). The token is compared in
    constant time and accepted only in the ``Authorization`` header, never in the query string;
    browsers log in once through the web pages' form and then send the ``lens_session`` cookie
    (see ``_refusal`` for where it counts). Unauthenticated page requests are sent to ``/login``.
    """

    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.policy = HostPolicy(settings)
        self.token = settings.token.encode() if settings.token else None
        self.session = session_value(settings.token).encode() if settings.token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not self.policy.host_ok(headers.get("host")):
            resp = error_response(
                421,
                "invalid_host",
                f"Host header {headers.get('host')!r} is not allowed; "
                "start the server with --allowed-host NAME to accept it",
            )
            await resp(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is not None and not self.policy.origin_ok(origin):
            resp = error_response(403, "invalid_origin", f"Origin {origin!r} is not allowed")
            await resp(scope, receive, send)
            return
        scope = _lower_host(scope)  # the SDK's own check on /mcp compares case-sensitively
        # slash commands carry the chat platform's signature instead (checked by their routes)
        if self.token is not None and not str(scope.get("path", "")).startswith(SIGNED_PATHS):
            refusal = self._refusal(scope, headers, origin)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope, headers: Headers, origin: str | None) -> ASGIApp | None:
        """Why a request is not authenticated (a response), or None when it is.

        The bearer header works everywhere. The login cookie works for pages and for the pages'
        own fetches of ``/api`` (not from another site: ``Sec-Fetch-Site`` same-site or
        cross-site is refused), never for ``/mcp``; a request that changes something on the
        strength of the cookie must carry an allowed ``Origin``.
        """
        path: str = scope.get("path", "")
        method: str = scope.get("method", "GET")
        is_api = path.startswith(API_PREFIXES)
        auth = headers.get("authorization", "")
        scheme, _, given = auth.partition(" ")
        assert self.token is not None
        if auth and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token):
            return None
        if path.startswith(PUBLIC_PREFIXES) and not auth:
            if method not in SAFE_METHODS and origin is None:
                return error_response(403, "origin_required", "a form post must carry an Origin header")
            return None
        if not auth and self._has_session(headers) and not path.startswith("/mcp"):
            if is_api and headers.get("sec-fetch-site") in ("cross-site", "same-site"):
                return error_response(
                    403, "cross_site", "the login cookie is refused on requests from another site"
                )
            if method not in SAFE_METHODS and origin is None:
                return error_response(
                    403, "origin_required", "a request signed by the login cookie must carry an Origin header"
                )
            return None
        if not is_api and not auth and method in SAFE_METHODS:
            target = path + (
                f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else ""
            )
            return RedirectResponse(f"/login?{urlencode({'next': target})}", status_code=303)
        reason = "missing" if not auth else "wrong"
        return error_response(
            401,
            "unauthorized",
            f"bearer token {reason}; send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": 'Bearer realm="straggler-lens"'},
        )

    def _has_session(self, headers: Headers) -> bool:
        raw = headers.get("cookie")
        if not raw or self.session is None:
            return False
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(raw)
        except Exception:  # a malformed cookie header is no session
            return False
        morsel = jar.get(SESSION_COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.session)


def _lower_host(scope: Scope) -> Scope:
    """The scope with its Host and Origin headers in lower case (accepted names are compared so)."""
    headers = scope.get("headers") or []
    names = (b"host", b"origin")
    if not any(k in names and v != v.lower() for k, v in headers):
        return scope
    return {**scope, "headers": [(k, v.lower() if k in names else v) for k, v in headers]}


class PathNotAllowed(ValueError):
    """A server-side path outside every ``--allow-dir`` (or path access is off)."""


GLOB_CHARS = set("*?[")


def resolve_allowed(raw: str, allow_dirs: tuple[Path, ...]) -> list[Path]:
    """The real files a server-side path names, all inside an ``--allow-dir``.

    ``raw`` is a file or a directory (its non-hidden files, one level). Relative paths are taken
    against each allowed folder in order. ``..`` components and glob characters are refused
    outright; every file is resolved through its symlinks and must still lie inside an allowed
    folder, so a link pointing out of the folder is refused too.
    """
    if not allow_dirs:
        raise PathNotAllowed(
            "server-side paths are disabled; restart the server with --allow-dir DIR, "
            "or upload the files with POST /api/traces"
        )
    if not raw or "\x00" in raw:
        raise PathNotAllowed("empty or invalid path")
    p = Path(raw).expanduser()
    if ".." in p.parts:
        raise PathNotAllowed(f"path {raw!r} contains '..'; give a path inside an allowed folder")
    if GLOB_CHARS & set(raw):
        raise PathNotAllowed(f"path {raw!r} contains glob characters; name a file or a folder")
    allowed = ", ".join(str(d) for d in allow_dirs)
    if p.is_absolute() and not any(p.resolve().is_relative_to(d) for d in allow_dirs):
        # refused before anything is looked up, so the answer does not tell whether it exists
        raise PathNotAllowed(f"path {raw!r} lies outside the allowed folders ({allowed})")
    candidates = [p] if p.is_absolute() else [d / p for d in allow_dirs]
    target = next((c for c in candidates if c.exists()), None)
    if target is None:
        raise PathNotAllowed(f"no such file or folder {raw!r} (allowed folders: {allowed})")
    files = (
        sorted(f for f in target.iterdir() if f.is_file() and not f.name.startswith("."))
        if target.is_dir()
        else [target]
    )
    if not files:
        raise PathNotAllowed(f"folder {raw!r} holds no files")
    out = []
    for f in files:
        real = f.resolve(strict=True)
        if not any(real.is_relative_to(d) for d in allow_dirs):
            raise PathNotAllowed(f"path {str(f)!r} lies outside the allowed folders ({allowed})")
        if not real.is_file():
            raise PathNotAllowed(f"path {str(f)!r} is not a regular file")
        out.append(real)
    return out
