"""Fleet statistics against hand-computed values (no Ray): shares, weighting, CDFs, cause mix,
M_W share, spread, correlation, unreliable jobs counted apart, the parquet table round trip."""

from __future__ import annotations

import math

import pytest

from diagnosers.fleet import (
    COLUMN_NAMES,
    cdf,
    empty_row,
    fleet_statistics,
    read_table,
    render_fleet_text,
    spearman,
    write_table,
)


def _row(job: str, s: float, *, gpus: int, hours: float | None, cause: str | None = None,
         gain: float | None = None, m_w: float | None = None, fidelity: str = "good",
         ratios: list[float] | None = None) -> dict:
    wf = 1 - 1 / s
    return empty_row(
        job, status="ok", slowdown=s, straggling=s >= 1.1, wasted_fraction=wf, gpus=gpus,
        duration_hours=hours, gpu_hours=gpus * hours if hours else None,
        gpu_hours_wasted=gpus * hours * wf if hours else None, fidelity=fidelity, cause_1=cause,
        cause_1_gain=gain, m_w=m_w, _step_ratios=ratios or [1.0],
    )


ROWS = [
    _row("a", 1.0, gpus=128, hours=10.0, ratios=[1.0, 1.0]),
    _row("b", 1.25, gpus=256, hours=10.0, cause="stage-imbalance", gain=1.2, m_w=0.1, ratios=[0.9, 1.1]),
    _row("c", 2.0, gpus=512, hours=5.0, cause="faulty-machine", gain=1.9, m_w=0.9, ratios=[1.0, 1.0]),
    _row("d", 1.05, gpus=1024, hours=None, cause="gc-pause", gain=1.04, ratios=[1.0, 1.2]),
    _row("u", 5.0, gpus=64, hours=1.0, cause="faulty-machine", fidelity="unreliable"),
    empty_row("f", status="failed", error="TraceError: bad"),
]


def test_shares_and_weighting_match_hand_computation() -> None:
    r = fleet_statistics(ROWS)
    assert r.counts == {"jobs": 6, "analysed": 5, "failed": 1, "unreliable": 1, "reliable": 4}
    assert r.straggling_share == pytest.approx(2 / 4)
    # weighted over the jobs that have hours: a (1280 h, 0), b (2560 h, 0.2), c (2560 h, 0.5)
    assert r.gpu_hours == pytest.approx(1280 + 2560 + 2560)
    assert r.gpu_hours_wasted_share == pytest.approx((2560 * 0.2 + 2560 * 0.5) / 6400)
    assert r.unweighted_wasted_share == pytest.approx((0 + 0.2 + 0.5 + (1 - 1 / 1.05)) / 4)
    mix = {m.cause: m for m in r.cause_mix}
    assert set(mix) == {"stage-imbalance", "faulty-machine", "gc-pause"}  # not the unreliable job's
    assert mix["faulty-machine"].top_share == pytest.approx(0.25)
    assert mix["faulty-machine"].mean_slowdown == pytest.approx(2.0)
    assert r.no_cause_share == pytest.approx(0.25)
    assert r.m_w_most_share == pytest.approx(0.5)  # b 0.1, c 0.9 among the straggling
    assert r.step_spread["max"] == pytest.approx(1.2)
    assert r.step_spread["median"] == pytest.approx(1.0)
    assert r.unreliable_jobs == ["u"] and r.failures == {"f": "TraceError: bad"}
    assert r.size_correlation == pytest.approx(spearman([128, 256, 512, 1024], [1.0, 1.25, 2.0, 1.05]))
    text = render_fleet_text(r)
    assert "Straggling jobs (S >= 1.1): 50.0%" in text and "f: TraceError: bad" in text


def test_spearman_and_cdf_against_a_simple_oracle() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    # ties: average ranks, then Pearson on ranks
    x, y = [1, 2, 2, 3], [1, 3, 2, 4]
    rx, ry = [1, 2.5, 2.5, 4], [1, 3, 2, 4]
    mx, my = sum(rx) / 4, sum(ry) / 4
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    oracle = cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    assert spearman(x, y) == pytest.approx(oracle)
    c = cdf([3.0, 1.0, 2.0])
    assert c.x == [1.0, 2.0, 3.0] and c.p == pytest.approx([1 / 3, 2 / 3, 1.0])
    thin = cdf(list(range(1000)), points=50)
    assert len(thin.x) <= 50 and thin.x[-1] == 999 and thin.p[-1] == 1.0


def test_table_round_trip_keeps_nulls(tmp_path) -> None:
    path = write_table(ROWS, tmp_path / "fleet.parquet")
    back = read_table(path)
    assert [r["job_id"] for r in back] == ["a", "b", "c", "d", "u", "f"]
    assert set(back[0]) == set(COLUMN_NAMES)
    assert back[3]["gpu_hours"] is None and back[5]["slowdown"] is None
    again = fleet_statistics(back)  # from the table: spread pooled from per-job p90 (null here)
    assert again.straggling_share == pytest.approx(0.5)
    assert again.counts["failed"] == 1
