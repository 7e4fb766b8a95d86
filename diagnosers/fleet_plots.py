"""PNG plots of a fleet report (matplotlib, Agg backend): CDFs of S and of wasted fraction, the
cause mix, and S against job size. Each function writes one file and returns its path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from diagnosers.fleet import FleetReport
from diagnosers.vocab import STRAGGLING_THRESHOLD


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_cdfs(report: FleetReport, path: str | Path) -> Path:
    """CDF of S (straggling line at 1.1) beside the CDF of the wasted fraction (1 − 1/S)."""
    plt = _pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    a.step(report.slowdown_cdf.x, report.slowdown_cdf.p, where="post")
    a.axvline(STRAGGLING_THRESHOLD, color="red", linestyle="--", linewidth=1, label="S = 1.1")
    a.set(xlabel="job slowdown S", ylabel="share of jobs", title="CDF of S")
    a.legend(loc="lower right")
    b.step(report.wasted_fraction_cdf.x, report.wasted_fraction_cdf.p, where="post", color="tab:orange")
    b.set(xlabel="wasted fraction 1 - 1/S", title="CDF of wasted fraction")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1.02)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_cause_mix(report: FleetReport, path: str | Path) -> Path:
    """Bars: each cause's share of jobs as the top cause, with its jobs' mean S written on the bar."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = [m.cause for m in report.cause_mix] + ["(none)"]
    shares = [m.top_share for m in report.cause_mix] + [report.no_cause_share or 0.0]
    bars = ax.barh(names[::-1], [100 * s for s in shares[::-1]])
    slow = [m.mean_slowdown for m in report.cause_mix] + [None]
    for bar, s in zip(bars, slow[::-1], strict=True):
        if s is not None:
            y = bar.get_y() + bar.get_height() / 2
            ax.text(bar.get_width(), y, f" S={s:.2f}", va="center", fontsize=8)
    ax.set(xlabel="% of jobs (top cause)", title="Cause mix")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_size(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """S against GPU count (log x), reliable analysed jobs only."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    pts = [(r["gpus"], r["slowdown"]) for r in rows
           if r.get("status") == "ok" and r.get("fidelity") != "unreliable" and r.get("gpus")]
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, alpha=0.6)
        ax.set_xscale("log", base=2)
    ax.axhline(STRAGGLING_THRESHOLD, color="red", linestyle="--", linewidth=1)
    ax.set(xlabel="GPUs", ylabel="S", title="Slowdown against job size")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_plots(report: FleetReport, rows: Sequence[Mapping[str, Any]], out_dir: str | Path) -> list[Path]:
    """All fleet plots into ``out_dir``: cdf.png, causes.png, size.png."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    return [plot_cdfs(report, d / "cdf.png"), plot_cause_mix(report, d / "causes.png"),
            plot_size(rows, d / "size.png")]
