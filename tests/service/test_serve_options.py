"""``straggler-lens serve`` refuses bad monitoring options at start, naming the file and line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def serve(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", "0", "--data-dir", str(tmp / "d"), *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


def test_a_bad_rules_file_stops_the_server_with_its_line(tmp_path: Path) -> None:
    rules = tmp_path / "alerts.yaml"
    rules.write_text("rules:\n  - name: r\n    when: {slowdown_above: fast}\n    to: [nowhere]\n")
    done = serve(tmp_path, "--alerts", str(rules))
    assert done.returncode == 2
    assert f"{rules}, line 3: slowdown_above must be a number, not 'fast'" in done.stderr


def test_lease_must_cover_the_delivery_timeout(tmp_path: Path) -> None:
    rules = tmp_path / "alerts.yaml"
    rules.write_text(
        "destinations:\n  d: {type: slack, url: 'http://127.0.0.1:9/x'}\n"
        "rules:\n  - {name: r, when: {slowdown_above: 1.2}, to: [d]}\ndelivery: {timeout: 30s}\n"
    )
    done = serve(tmp_path, "--alerts", str(rules), "--lease", "20")
    assert done.returncode == 2 and "--lease 20 must be at least twice" in done.stderr
    missing = serve(tmp_path, "--slack-signing-secret-file", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read --slack-signing-secret-file" in missing.stderr
