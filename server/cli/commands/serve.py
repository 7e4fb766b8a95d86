"""``straggler-lens serve``: run the MCP + REST server with uvicorn."""

from __future__ import annotations

import argparse
import sys


def port_number(text: str) -> int:
    """A TCP port, 0-65535 (0 = any free port)."""
    try:
        port = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from exc
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {port}")
    return port


def preflight(host: str, port: int, data_dir: object) -> str | None:
    """Why the server could not start, checked before uvicorn runs (it would log a traceback for a
    data folder it cannot create, and open the store before finding the port taken), or None."""
    import socket
    import tempfile
    from pathlib import Path

    folder = Path(str(data_dir))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return f"cannot use --data-dir {folder}: {exc.strerror or exc}"
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot resolve --host {host}: {exc.strerror}"
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            sock.bind(addr)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return f"cannot listen on {host}:{port}: {reason} (another server running? use --port)"
    return None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the MCP (Streamable HTTP at /mcp) and REST (/api) server",
        description="Serve MCP at /mcp and REST under /api. Binds to loopback by default; a "
        "non-loopback address needs --allowed-host and --token-file.",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8000, help="port (default 8000; 0 = any free port)")
    p.add_argument(
        "--data-dir",
        default=None,
        help="SQLite database and stored traces (default $XDG_DATA_HOME/straggler-lens or "
        "~/.local/share/straggler-lens)",
    )
    p.add_argument("--token-file", default=None, help="file holding the bearer token every request must send")
    p.add_argument(
        "--allow-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="folder whose files upload_trace(path=...) may read (repeatable; default: none)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="H",
        help="extra Host name (or name:port) accepted besides loopback (repeatable)",
    )
    p.add_argument("--max-upload-mb", type=float, default=512, help="upload size cap in MiB (default 512)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes for heavy work (default: one per core; 0 = threads of the server)",
    )
    p.add_argument(
        "--retention-days",
        type=float,
        default=None,
        metavar="D",
        help="delete traces stored more than D days ago, at start and hourly (default: keep all)",
    )
    p.add_argument("--preload-sample", action="store_true", help="store the bundled ST sample trace at start")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from server.app import create_app
    from server.core.settings import Settings, SettingsError

    try:
        settings = Settings.build(
            data_dir=args.data_dir,
            token_file=args.token_file,
            allow_dirs=args.allow_dir,
            allowed_hosts=args.allowed_host,
            max_upload_mb=args.max_upload_mb,
            host=args.host,
            port=args.port,
            preload_sample=args.preload_sample,
            workers=args.workers,
            retention_days=args.retention_days,
        )
    except SettingsError as exc:
        print(f"straggler-lens serve: error: {exc}", file=sys.stderr)
        return 2
    problem = preflight(args.host, args.port, settings.data_dir)
    if problem:
        print(f"straggler-lens serve: error: {problem}", file=sys.stderr)
        return 2
    app = create_app(settings)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"straggler-lens: MCP at http://{shown}:{args.port}/mcp, REST at http://{shown}:{args.port}/api "
        f"(data in {settings.data_dir})",
        file=sys.stderr,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, proxy_headers=False)
    return 0
