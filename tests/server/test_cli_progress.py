"""CLI progress: a bar on a terminal after the first second, nothing when stderr is piped."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from server.cli.progress import Bar, progress_bar


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_that_never_runs_backwards_and_is_erased() -> None:
    out = Tty()
    with progress_bar("work ", stream=out, delay=0.0) as bar:
        bar(0.5, "half")
        bar(0.2, "late message")
        assert "[##############..............]  50% half" in out.getvalue()
        assert " 50% late message" in out.getvalue()
    assert out.getvalue().endswith("\r" + " " * 100 + "\r")


def test_quick_work_and_pipes_stay_silent() -> None:
    quick = Tty()
    with progress_bar(stream=quick, delay=60.0) as bar:
        bar(0.9, "x")
    assert quick.getvalue() == ""
    piped = io.StringIO()
    b = Bar(piped, delay=0.0)
    b(0.5, "x")
    b.close()
    assert piped.getvalue() == ""


def test_the_cli_prints_no_progress_when_piped(st_files: list[Path]) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    r = subprocess.run(
        [sys.executable, "-m", "server.cli", "analyze", *map(str, st_files)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "[#" not in r.stderr and "%" not in r.stderr
