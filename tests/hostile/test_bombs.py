"""Each memory-bomb class of issue 19 in its own process: refused, with a peak RSS (``wait4``'s
``ru_maxrss``) under 1 GiB. The nested-gzip case runs with a 16 MiB upload cap (64 MiB inflated)
to stay fast; docs/SERVER.md gives its figure on the default settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT_KIB = 1024 * 1024  # 1 GiB


@pytest.mark.parametrize(
    "case, status, words",
    [
        ("yaml_alias", 422, "anchor or alias"),
        ("nested_gzip", 413, "every compression layer counts"),
        ("rle_parquet", 413, "more than 20,000,000 ops"),
        ("kineto_json", 413, "larger than 64 MiB"),
        ("layout", 413, "workers but the trace holds only 4 ops"),
    ],
)
def test_bomb_is_refused_within_a_gib(case: str, status: int, words: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    errors = tmp_path / "stderr.txt"
    with open(errors, "wb") as err_fh:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("bomb_child.py")), case, str(tmp_path / "data")],
            stdout=subprocess.PIPE,
            stderr=err_fh,
            env=env,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        with proc.stdout:
            out = proc.stdout.read().decode()
        _, code, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(code)
    err = errors.read_text()
    assert proc.returncode == 0, err[-2000:]
    assert out.startswith(str(status)) and words in out, out
    assert usage.ru_maxrss < LIMIT_KIB, f"{case}: peak RSS {usage.ru_maxrss / 1024:.0f} MiB"
    assert not any((tmp_path / "data" / "traces").iterdir()) and not any(
        (tmp_path / "data" / "tmp").iterdir()
    )
