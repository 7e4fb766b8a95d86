"""Server settings: one frozen object built from the command line and passed into the app factory.

Nothing here reads the environment at import time; ``default_data_dir`` is consulted only when the
caller does not name a data folder.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnosers.readers.validate import ReadLimits

MIB = 1024 * 1024

# Host names that always reach this machine only. A bind to one of these keeps the default
# allowlist; any other bind address needs an explicit --allowed-host and a token.
LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost", "[::1]")

# MCP inline uploads: at most this many decoded bytes travel through JSON-RPC (base64 inflates
# them by 4/3, which stays well below the transport's request-body cap set in app.py).
MAX_INLINE_BYTES = 1 * MIB


DEFAULT_MAX_OPS = 20_000_000
# A request's headers must arrive within this many seconds, a whole upload within the deadline.
HEADER_TIMEOUT_S = 30.0
UPLOAD_DEADLINE_S = 3600.0


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/straggler-lens``, else ``~/.local/share/straggler-lens``."""
    base = os.environ.get("XDG_DATA_HOME")
    root = Path(base) if base else Path.home() / ".local" / "share"
    return root / "straggler-lens"


def is_loopback(host: str) -> bool:
    """Whether a bind address or Host name only reaches this machine."""
    bare = host.strip("[]")
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


class SettingsError(ValueError):
    """The settings cannot start a safe server; the message says which option fixes it."""


@dataclass(frozen=True)
class Settings:
    """Everything the app factory needs.

    ``token`` is the bearer secret itself (read from ``--token-file``), never a path. Upload caps
    are in bytes: ``max_upload_bytes`` bounds what crosses the wire, ``max_decompressed_bytes``
    bounds what a gzip body may expand to (a gzip bomb stops there).
    """

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    allow_dirs: tuple[Path, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    max_upload_bytes: int = 512 * MIB
    max_decompressed_bytes: int = 2048 * MIB
    max_inline_bytes: int = MAX_INLINE_BYTES
    # ops per upload, checked from a parquet footer before any row is read (admits a 16M-op job)
    max_ops: int | None = DEFAULT_MAX_OPS
    # one profiler-JSON document, decoded (the parse needs ~6 bytes of memory per byte)
    max_json_bytes: int | None = 512 * MIB
    preload_sample: bool = False
    trace_cache_size: int = 4
    # heavy work: worker processes (None = one per core, 0 = threads of the server process) and
    # how many jobs may wait for one before requests are refused with a 503
    workers: int | None = None
    max_queue: int = 64
    # where state lives and where analyses run (a cluster): None = SQLite in data_dir, else a
    # postgresql:// URL shared by replicas (``replica`` names this one's staging folder);
    # executor "local" (the process pool above) or "ray" (tasks on the cluster at ray_address)
    database: str | None = None
    replica: str | None = None
    executor: str = "local"
    ray_address: str | None = None
    # the monitoring service (server/core/monitor.py): window grace period, lease and poll seconds,
    # the address chat platforms see, parsed --alerts rules, slash-command secrets
    grace_s: float = 300.0
    lease_s: float = 60.0
    poll_s: float = 0.5
    public_url: str | None = None
    alerts: Any = None
    slack_signing_secret: str | None = None
    mattermost_token: str | None = None
    chat_answer_s: float = 2.5  # slower slash-command answers go to response_url (platform limit 3 s)
    # slow clients: headers within header_timeout_s, the whole upload body within upload_deadline_s
    header_timeout_s: float = HEADER_TIMEOUT_S
    upload_deadline_s: float = UPLOAD_DEADLINE_S

    def read_limits(self, expanded: int = 0) -> ReadLimits:
        """The readers' budgets on this server: the decompression cap less what the upload's outer
        gzip layer already inflated (``expanded``), and the op bound."""
        left = max(0, self.max_decompressed_bytes - expanded)
        return ReadLimits(
            max_decompressed_bytes=left,
            max_ops=self.max_ops,
            max_parallel=1_000_000,
            max_json_bytes=self.max_json_bytes,
        )
    # folders holding fleet reports (`straggler-lens fleet -o DIR`), read by get_fleet_report
    fleet_dirs: tuple[Path, ...] = ()
    # traces older than this many days are deleted at start and then every retention_check_s
    retention_days: float | None = None
    retention_check_s: float = 3600.0

    def __post_init__(self) -> None:
        if not is_loopback(self.host) and not self.allowed_hosts:
            raise SettingsError(
                f"binding {self.host} needs --allowed-host NAME for every host name clients use"
            )
        if not is_loopback(self.host) and not self.token:
            raise SettingsError(
                f"refusing to listen on non-loopback address {self.host} without --token-file"
            )
        if self.workers is not None and self.workers < 0:
            raise SettingsError("--workers must be 0 (threads) or more")
        if self.max_queue < 0:
            raise SettingsError("the executor queue bound must be 0 or more")
        if self.max_ops is not None and self.max_ops < 1:
            raise SettingsError("--max-ops must be positive")
        if self.database and not self.database.startswith(("postgresql://", "postgres://", "sqlite:")):
            raise SettingsError(
                f"--database {self.database!r}: give a postgresql://user@host:port/dbname URL "
                "(or omit it for SQLite in the data folder)"
            )
        if self.executor not in ("local", "ray"):
            raise SettingsError(f"--executor {self.executor!r}: choose local or ray")
        if self.executor != "ray" and self.ray_address:
            raise SettingsError("--ray-address needs --executor ray")
        if self.retention_days is not None and not self.retention_days > 0:
            raise SettingsError("--retention-days must be positive")
        if self.max_upload_bytes <= 0:
            raise SettingsError("--max-upload-mb must be positive")

    @classmethod
    def build(
        cls,
        *,
        data_dir: str | Path | None = None,
        token_file: str | Path | None = None,
        allow_dirs: list[str] | tuple[str, ...] = (),
        allowed_hosts: list[str] | tuple[str, ...] = (),
        max_upload_mb: float = 512,
        **kw: object,
    ) -> Settings:
        """Build from command-line style values: reads the token file, resolves folders."""
        token: str | None = None
        if token_file is not None:
            path = Path(token_file).expanduser()
            try:
                token = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise SettingsError(f"cannot read --token-file {path}: {exc.strerror}") from exc
            if len(token) < 16:
                raise SettingsError(f"--token-file {path} holds a token shorter than 16 characters")
        dirs = []
        for d in allow_dirs:
            p = Path(d).expanduser()
            if not p.is_dir():
                raise SettingsError(f"--allow-dir {d} is not a directory")
            dirs.append(p.resolve(strict=True))
        upload = int(max_upload_mb * MIB)
        return cls(
            data_dir=Path(data_dir).expanduser() if data_dir else default_data_dir(),
            token=token,
            allow_dirs=tuple(dirs),
            allowed_hosts=tuple(allowed_hosts),
            max_upload_bytes=upload,
            max_decompressed_bytes=4 * upload,
            **kw,  # type: ignore[arg-type]
        )
