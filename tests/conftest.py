"""Fixtures shared by every test folder: a real throwaway PostgreSQL server.

``pg_server`` starts Debian's PostgreSQL 15 binaries once per session, as the ``postgres`` user
(initdb and postgres refuse root), in a temporary folder on a free loopback port, with fsync off
(a test database needs no durability); ``pg_dsn`` gives each test a fresh database on it. When
the binaries are missing the PostgreSQL cases skip with the install command (``.ci/run``
installs them, so CI runs them).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator

import pytest

PGBIN = "/usr/lib/postgresql/15/bin"


def _as_postgres(*cmd: str) -> None:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *cmd], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A running PostgreSQL 15 on 127.0.0.1; yields the libpq URL prefix ``postgresql://postgres@127.0.0.1:PORT``."""
    if not os.path.exists(f"{PGBIN}/initdb"):
        pytest.skip("PostgreSQL 15 server not installed (apt-get install -y postgresql)")
    base = tempfile.mkdtemp(prefix="pgt-")  # short: the unix socket path must stay under ~100 bytes
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = os.path.join(base, "data")
    _as_postgres(
        f"{PGBIN}/initdb",
        "-D",
        data,
        "-U",
        "postgres",
        "-A",
        "trust",
        "--no-locale",
        "-E",
        "UTF8",
        "--no-sync",
    )
    _as_postgres(
        f"{PGBIN}/pg_ctl",
        "-D",
        data,
        "-l",
        os.path.join(base, "log"),
        "-w",
        "-t",
        "30",
        "-o",
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        " -c max_connections=100",
        "start",
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        _as_postgres(f"{PGBIN}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A fresh empty database on the session's server (dropped after the test), as a URL."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(f"{pg_server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{pg_server}/{name}"
    finally:
        with psycopg.connect(f"{pg_server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
