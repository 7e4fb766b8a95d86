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


def limit_options(args: argparse.Namespace) -> dict[str, object]:
    """The budget options given on the command line, as ``Settings`` fields."""
    out: dict[str, object] = {}
    for arg, key in (("max_ops", "max_ops"), ("header_timeout", "header_timeout_s"),
                     ("upload_deadline", "upload_deadline_s"), ("max_json_mb", "max_json_bytes")):
        value = getattr(args, arg, None)
        if value is not None:
            if value <= 0:
                raise SystemExit(f"straggler-lens serve: error: --{arg.replace('_', '-')} must be positive")
            out[key] = int(value * 1024 * 1024) if arg == "max_json_mb" else value
    return out


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
    p.add_argument(
        "--fleet-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="folder of fleet reports (straggler-lens fleet -o DIR) that get_fleet_report reads (repeatable)",
    )
    p.add_argument("--max-upload-mb", type=float, default=512, help="upload size cap in MiB (default 512)")
    p.add_argument(
        "--max-ops",
        type=int,
        default=None,
        metavar="N",
        help="ops per uploaded trace, checked before rows are read (default 20,000,000)",
    )
    p.add_argument(
        "--max-json-mb",
        type=float,
        default=None,
        metavar="N",
        help="decoded size of one profiler-JSON document in MiB (default 512)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds a client may take to send a request's headers (default 30)",
    )
    p.add_argument(
        "--upload-deadline",
        type=float,
        default=None,
        metavar="S",
        help="seconds a whole upload body may take (default 3600)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes for heavy work (default: one per core; 0 = threads of the server)",
    )
    p.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="postgresql://user@host:port/dbname: state in PostgreSQL, shared by server replicas "
        "(default: SQLite in the data folder)",
    )
    p.add_argument(
        "--replica-id",
        default=None,
        metavar="NAME",
        help="with --database: this replica's name, its own staging folder tmp/NAME "
        "(default: host name + random)",
    )
    p.add_argument(
        "--executor",
        default="local",
        choices=["local", "ray"],
        help="where analyses run: local worker processes (default) or a Ray cluster",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="with --executor ray: the cluster (host:port, ray://host:10001 or auto; default: a local Ray)",
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
    add_monitor_options(p)
    p.set_defaults(func=run)


def add_monitor_options(p: argparse.ArgumentParser) -> None:
    """Options of the monitoring service: live windows, alerts, chat commands."""
    g = p.add_argument_group("monitoring (live windows, alerts, chat)")
    g.add_argument("--alerts", default=None, metavar="FILE", help="alert rules YAML (see docs/ALERTS.md)")
    g.add_argument(
        "--grace",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds a window waits for missing ranks after its first one (default 300)",
    )
    g.add_argument(
        "--lease",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds a claimed analysis or delivery is held without renewal (default 60)",
    )
    g.add_argument("--poll", type=float, default=0.5, metavar="S", help=argparse.SUPPRESS)
    g.add_argument(
        "--public-url",
        default=None,
        metavar="URL",
        help="this server's address as chat platforms see it (links; heatmap images in chat)",
    )
    g.add_argument(
        "--slack-signing-secret-file",
        default=None,
        metavar="F",
        help="Slack app signing secret: enables POST /api/chat/slack",
    )
    g.add_argument(
        "--mattermost-token-file",
        default=None,
        metavar="F",
        help="Mattermost slash-command token: enables POST /api/chat/mattermost",
    )


def monitor_settings(args: argparse.Namespace) -> dict[str, object]:
    """The Settings fields of the monitoring options; reads and validates the files they name."""
    from pathlib import Path

    from diagnosers.vocab import CauseId
    from server.core.alert_rules import load_rules
    from server.core.settings import SettingsError

    def secret(path: str | None, option: str) -> str | None:
        if path is None:
            return None
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SettingsError(f"cannot read {option} {path}: {exc.strerror}") from exc
        if len(text) < 8:
            raise SettingsError(f"{option} {path} holds a secret shorter than 8 characters")
        return text

    for name in ("grace", "lease", "poll"):
        if getattr(args, name) <= 0:
            raise SettingsError(f"--{name} must be positive")
    rules = load_rules(args.alerts, {str(c) for c in CauseId}) if args.alerts else None
    if rules is not None and args.lease < 2 * rules.delivery.timeout_s:
        # a delivery try must end well inside its lease, or a second server could send it too
        raise SettingsError(
            f"--lease {args.lease:g} must be at least twice the alerts' delivery timeout "
            f"({rules.delivery.timeout_s:g} s in {args.alerts})"
        )
    return {
        "alerts": rules,
        "grace_s": args.grace,
        "lease_s": args.lease,
        "poll_s": args.poll,
        "public_url": args.public_url.rstrip("/") if args.public_url else None,
        "slack_signing_secret": secret(args.slack_signing_secret_file, "--slack-signing-secret-file"),
        "mattermost_token": secret(args.mattermost_token_file, "--mattermost-token-file"),
    }


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import uvicorn

    from server.app import create_app
    from server.core.alert_rules import RulesError
    from server.core.settings import Settings, SettingsError

    try:
        settings = Settings.build(
            **monitor_settings(args),
            data_dir=args.data_dir,
            token_file=args.token_file,
            allow_dirs=args.allow_dir,
            allowed_hosts=args.allowed_host,
            max_upload_mb=args.max_upload_mb,
            host=args.host,
            port=args.port,
            preload_sample=args.preload_sample,
            workers=args.workers,
            **limit_options(args),
            database=args.database,
            replica=args.replica_id,
            executor=args.executor,
            ray_address=args.ray_address,
            fleet_dirs=tuple(Path(d).expanduser() for d in args.fleet_dir),
            retention_days=args.retention_days,
        )
    except (SettingsError, RulesError) as exc:
        print(f"straggler-lens serve: error: {exc}", file=sys.stderr)
        return 2
    problem = preflight(args.host, args.port, settings.data_dir)
    if problem:
        print(f"straggler-lens serve: error: {problem}", file=sys.stderr)
        return 2
    from server.core import datalock
    from server.core.slow_clients import protocol_with_header_timeout

    # SQLite: one server per data folder, the lock held for the life of this process (the kernel
    # drops it if the process dies); PostgreSQL replicas share their folder by design
    if not settings.database or settings.database.startswith("sqlite:"):
        try:
            datalock.acquire(settings.data_dir)
        except datalock.DataDirLocked as exc:
            print(f"straggler-lens serve: error: {exc}", file=sys.stderr)
            return 2
    app = create_app(settings)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"straggler-lens: MCP at http://{shown}:{args.port}/mcp, REST at http://{shown}:{args.port}/api "
        f"(data in {settings.data_dir})",
        file=sys.stderr,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        proxy_headers=False,
        http=protocol_with_header_timeout(settings.header_timeout_s),
    )
    return 0
