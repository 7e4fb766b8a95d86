"""Helpers of the web tests, in a module of its own: a test file importing from ``conftest`` gets
whichever folder's conftest pytest imported last (tests/server's when both folders run together).
Importable: pytest puts this folder on sys.path."""

from __future__ import annotations

import json

TOKEN = "web-test-token-0123456789"


def native_trace(dp: int = 2, steps: int = 4, slow_dp: int = 1) -> bytes:
    """A small native JSON Lines trace: ``dp`` x 1 workers, DP rank ``slow_dp`` computing 1.6x longer."""
    header = {
        "format": "straggler-lens/native",
        "version": 1,
        "job": {"dp_size": dp, "pp_size": 1, "trial_name": "web"},
    }
    lines = [json.dumps(header)]
    for step in range(steps):
        for d in range(dp):
            k = 1.6 if d == slow_dp else 1.0
            t = step * 0.2
            for optype, start, dur in (
                ("forward-compute", 0.0, 0.010 * k),
                ("backward-compute", 0.03, 0.020 * k),
            ):
                lines.append(
                    json.dumps(
                        {
                            "dp_rank": d,
                            "stage": 0,
                            "rank": d,
                            "step": step,
                            "optype": optype,
                            "start_ts": t + start,
                            "duration": dur,
                            "seq_id": 0,
                            "mc": 0,
                            "gmc": 0,
                            "mb_id": 0,
                        }
                    )
                )
    return ("\n".join(lines) + "\n").encode()
