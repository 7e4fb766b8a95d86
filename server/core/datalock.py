"""One server per data folder: an OS lock (``flock``) on ``<data-dir>/lens.lock``.

The kernel releases a ``flock`` when its holder dies, even by ``kill -9``, so a crashed server
never blocks the next start, while a second live server on the same folder is refused before it
touches anything (its start-up cleanup would otherwise delete the first one's staging folders and
just-committed traces). The lock is per process and counted: the serve command takes it before
uvicorn starts (to refuse with a clear message) and the store takes it again when it opens.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

LOCK_NAME = "lens.lock"


class DataDirLocked(RuntimeError):
    """Another live process holds the data folder's lock; the message names its pid."""


_held: dict[str, tuple[int, int]] = {}  # resolved folder -> (fd, holders in this process)
_guard = threading.Lock()


def _key(folder: Path) -> str:
    return str(Path(folder).resolve())


def acquire(folder: Path) -> None:
    """Take the folder's lock (again, when this process holds it already) or raise ``DataDirLocked``."""
    key = _key(folder)
    with _guard:
        if key in _held:
            fd, count = _held[key]
            _held[key] = (fd, count + 1)
            return
        path = Path(key) / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise DataDirLocked(
                f"another Straggler Lens server (pid {holder}) is using the data folder {key}; "
                "stop it, or give this one its own --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held[key] = (fd, 1)


def release(folder: Path) -> None:
    """Give back one hold of the folder's lock; the last one unlocks it."""
    key = _key(folder)
    with _guard:
        if key not in _held:
            return
        fd, count = _held[key]
        if count > 1:
            _held[key] = (fd, count - 1)
            return
        del _held[key]
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
