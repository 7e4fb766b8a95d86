"""Dataloader stalls: the GPU idles before a step's first forward while op durations stay normal.

The what-if engine zeroes launch delays, so S stays near 1; the stall lives in the launch
slowdown (measured over no-delay simulated step time) and in the idle gap before each worker's
first forward (METHOD.md A3, A5). Evidence, all of which must hold:
- launch slowdown above 1.05: the study discarded traces whose simulation error exceeded 5% as
  unexplained, so more than that is time the dependency model cannot account for;
- the per worker-step idle gap before the first forward, on the workers that stall, accounts
  for at least half of that unexplained time, or, when only one worker ever idles so, of the
  unexplained time of the steps it stalls (``share_in_stalling_steps``: one input pipeline late
  in one step is judged on that step), and for at least
  ``MIN_SHARE`` of all lost time (measured step time over the ideal one);
Stalling workers are those whose mean gap is at least half the largest worker's; stalling steps
those whose largest gap is at least half the largest step's. A gap on more than half the workers
of a job of at least 4 in only some steps (sporadic) is not one input pipeline running late but
the whole host pausing (on a busy machine every process is descheduled at once): it is named in
the diagnosis notes as a job-wide stall, not reported as a dataloader stall. Likewise a gap on
several workers at once in a single step of three or more: one host event (a few processes
descheduled together), named in the notes. One worker's gap in one step (a single slow fetch) is
still a dataloader stall.

Beside other matched causes (``beside_other_causes``) the stall may hold under ``MIN_SHARE`` of
the lost time when it alone costs ``SECONDARY_EFFECT`` (5%) of the ideal step, the compute
detectors' test for a cause beside a larger one (``base.real_share``), in most steps (persistent)
and on at most half the workers: late starts in a few steps or on most workers are a busy host's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from diagnosers.detectors.base import (
    MIN_SHARE,
    SECONDARY_EFFECT,
    CauseMatch,
    TraceStats,
    categories_for,
    confidence,
    rounded,
)
from diagnosers.detectors.registry import register, register_beside
from diagnosers.npplain import median
from diagnosers.vocab import CauseId, Pattern, Resource, Spatial, Temporal

if TYPE_CHECKING:
    from diagnosers.report_view import Report

LAUNCH_SLOWDOWN_MIN = 1.05
# a stall read on its own steps stands this many robust standard deviations out of the other
# steps' measured times (the transport-noise view's ``STALL_Z`` for a launch gap), judged from
# this many traced steps on
STEP_Z = 3.0
STEP_Z_MIN_STEPS = 3


def stall_seconds(stats: TraceStats) -> float:
    """Mean over steps of the largest idle gap before a first forward (the step waits for it)."""
    return float(stats.launch_idle.max(axis=(1, 2)).mean()) if stats.launch_idle.size else 0.0


def share_in_stalling_steps(report: Report, stats: TraceStats, per_step: np.ndarray) -> float:
    """How far the stall and the unexplained time of the steps it stalls are the same time.

    Over the steps whose largest gap is at least half the largest step's: per step the overlap
    ``min(gap, unexplained)`` (unexplained: measured minus simulated step time without launch
    delays, at least 0), summed, over the larger of the gaps' sum and the unexplained sum. At
    least 0.5 means the gap holds half of those steps' unexplained time and half of the gap is
    time the model does not explain (a gap the simulation covers is no stall). 0 without per-step
    times. A stall in one step of six is so weighed against that step: the mean over all steps
    dilutes it with the unexplained time every step of a busy host carries (scheduling, launch
    overhead), which is not the stall's and which the "share of the lost time" bar still counts."""
    actual, no_delay = report.step_times.actual, report.step_times.no_delay
    keys = [str(int(s)) for s in stats.steps]
    if not per_step.size or per_step.max() <= 0 or any(k not in actual or k not in no_delay for k in keys):
        return 0.0
    u = np.clip(np.array([actual[k] - no_delay[k] for k in keys], dtype=np.float64), 0.0, None)
    hit = per_step >= 0.5 * per_step.max()
    gap, left = per_step[hit], u[hit]
    overlap = float(np.minimum(gap, left).sum())
    return overlap / max(float(gap.sum()), float(left.sum()), 1e-12)


def lost_in_stalling_steps(report: Report, stats: TraceStats, per_step: np.ndarray) -> float:
    """The stall's share of the time lost in the steps it stalls: over the steps whose largest gap
    is at least half the largest step's, the gaps' sum over the sum of (measured step time minus
    the ideal one). 0 without per-step times or when those steps lose no time, and 0 unless each
    of those gaps stands ``STEP_Z`` robust standard deviations (1.4826 x MAD) out of the *other*
    steps' measured times (the report's; at least ``STEP_Z_MIN_STEPS`` steps): read on its own steps a stall
    must show in the step times, out of the job's own step-to-step noise, not only in the time
    the model leaves unexplained (on a busy host a process descheduled for a fraction of a step
    before its first op leaves such a gap in a healthy job)."""
    actual, ideal = report.step_times.actual, report.step_times.ideal
    keys = [str(int(s)) for s in stats.steps]
    if not per_step.size or per_step.max() <= 0 or any(k not in actual or k not in ideal for k in keys):
        return 0.0
    hit = per_step >= 0.5 * per_step.max()
    # the report's measured step times (on a detection view: with the transient noise it caps)
    times = np.array([actual[k] for k in keys], dtype=np.float64)
    if len(times) != len(per_step) or len(times) < STEP_Z_MIN_STEPS:
        return 0.0
    for k in np.flatnonzero(hit):
        others = np.delete(times, k)
        sigma = 1.4826 * float(median(np.abs(others - median(others))))
        if per_step[k] < STEP_Z * sigma:
            return 0.0
    lost = float(sum(actual[k] - ideal[k] for k, h in zip(keys, hit, strict=True) if h))
    return float(per_step[hit].sum()) / lost if lost > 0 else 0.0


@register(CauseId.DATALOADER_STALL)
def detect(report: Report, stats: TraceStats) -> CauseMatch | None:
    """Match unexplained launch time that sits in the gap before the steps' first forwards."""
    return _stall(report, stats, beside=False)


@register_beside
def beside_other_causes(report: Report, stats: TraceStats, matches: list[CauseMatch]) -> CauseMatch | None:
    """The dataloader stall beside the matched causes: every test of :func:`detect`, but the share
    of the lost time may be under ``MIN_SHARE`` when the stall alone costs ``SECONDARY_EFFECT`` (5%)
    of the ideal step (the compute detectors' ``real_share`` for a cause beside a larger one: a
    sequence-length imbalance that doubles the step holds most of the lost time, and a stall of
    15% of the ideal step is a seventh of it). None when a dataloader stall is matched already."""
    if not matches or any(m.id is CauseId.DATALOADER_STALL for m in matches):
        return None
    return _stall(report, stats, beside=True)


def _stall(report: Report, stats: TraceStats, *, beside: bool) -> CauseMatch | None:
    """The dataloader-stall finding (module doc); ``beside``: judged as a cause beside others."""
    if report.launch_slowdown < LAUNCH_SLOWDOWN_MIN or stats.launch_idle.size == 0:
        return None
    t_actual = float(np.mean(list(report.step_times.actual.values()))) if report.step_times.actual else 0.0
    if t_actual <= 0:
        return None
    unexplained = t_actual * (1.0 - 1.0 / report.launch_slowdown)
    stall = stall_seconds(stats)
    share = stall / unexplained if unexplained > 0 else 0.0
    per_worker = stats.launch_idle.mean(axis=0)  # (dp, pp)
    per_step = stats.launch_idle.max(axis=(1, 2))  # (S,)
    # the per-step reading is for one input pipeline: several workers idling together in a few
    # steps are as likely the host descheduling them at once (see the one-off and job-wide rules)
    one_worker = int((per_worker > 0).sum()) == 1
    in_steps = share_in_stalling_steps(report, stats, per_step) if one_worker else 0.0
    if max(share, in_steps) < 0.5:
        return None
    cells = [(int(d), int(p)) for d, p in zip(*np.nonzero(per_worker >= 0.5 * per_worker.max()), strict=True)]
    steps_hit = [int(s) for s, v in zip(stats.steps, per_step, strict=True) if v >= 0.5 * per_step.max()]
    n_workers = stats.dp * stats.pp
    if len(cells) == n_workers:
        spatial = Spatial.JOB_WIDE
    elif len(cells) == 1:
        spatial = Spatial.SINGLE_WORKER
    elif len({int(stats.host_of[d, p]) for d, p in cells}) == 1:
        spatial = Spatial.ONE_HOST
    else:
        spatial = Spatial.RANDOM_DP
    temporal = Temporal.PERSISTENT if len(steps_hit) >= 0.75 * stats.n_steps else Temporal.SPORADIC
    if temporal == Temporal.SPORADIC and len(steps_hit) == 1 and len(cells) >= 2 and stats.n_steps >= 3:
        # Several input pipelines late at the same moment, once: one host event (on a busy
        # machine a few processes descheduled together), as the job-wide case below. A slow fetch
        # of one rank's loader, even once, stays a dataloader stall.
        note = (
            f"one-off launch stall: {len(cells)} of {n_workers} workers idled before their first forward "
            f"in step {steps_hit[0]} only ({stall * 1e3:.0f} ms per step on average over the "
            f"{stats.n_steps} steps); one host event, not reported as a dataloader stall"
        )
        if note not in stats.notes:
            stats.notes.append(note)
        return None
    if temporal == Temporal.SPORADIC and n_workers >= 4 and len(cells) > n_workers / 2:
        note = (
            f"job-wide stall: {len(cells)} of {n_workers} workers idled before their first forward in "
            f"steps {steps_hit} ({stall * 1e3:.0f} ms per step on average); a host-wide pause, not one "
            "input pipeline, so no dataloader stall is reported"
        )
        if note not in stats.notes:
            stats.notes.append(note)
        return None
    # Rank against other causes on the same scale: the share of all lost time (actual step time
    # over the ideal one) that the stall accounts for.
    t_ideal = float(np.mean(list(report.step_times.ideal.values()))) if report.step_times.ideal else t_actual
    lost_share = stall / (t_actual - t_ideal) if t_actual > t_ideal else 1.0
    # One input pipeline late in a few steps is weighed against the time lost in those steps, as
    # its share of the unexplained time is (``share_in_stalling_steps``): over all steps of a busy
    # host the time lost to the host's own noise in every step dilutes it.
    lost_in_steps = lost_in_stalling_steps(report, stats, per_step) if one_worker else 0.0
    # beside a larger cause, its own cost decides: a stall of SECONDARY_EFFECT of the ideal step,
    # in most steps and on at most half the workers (a few late starts, or late starts on most
    # workers, beside a larger cause are a busy host's: heldout2 var-seq-2x2, 44 ms in 2 steps;
    # heldout5 send-delay-4x2, 25 ms on 5 of 8 workers)
    secondary = (
        beside and temporal == Temporal.PERSISTENT and 2 * len(cells) <= n_workers
        and t_ideal > 0 and stall >= SECONDARY_EFFECT * t_ideal
    )
    if max(lost_share, lost_in_steps) < MIN_SHARE and not secondary:
        return None  # real, but a small part of the lost time: not a cause worth an alert
    fit = 0.8 + 0.2 * min(1.0, share)
    summary = (
        f"Steps take {report.launch_slowdown:.3f}x the time the dependency model explains (launch "
        f"slowdown), while op durations are normal (S = {report.slowdown:.3f}). The GPUs idle for "
        f"{stall * 1e3:.0f} ms per step before the first forward on {len(cells)} of {n_workers} workers in "
        f"{len(steps_hit)} of {stats.n_steps} steps: the input pipeline or host-side work is late. "
        f"That gap is {share * 100:.0f}% of the unexplained time; check data loading, prefetching and "
        f"the host CPUs of these ranks."
    )
    return CauseMatch(
        id=CauseId.DATALOADER_STALL,
        confidence=confidence(lost_share, fit),
        location=stats.location(cells, steps_hit),
        pattern=Pattern(spatial=spatial, temporal=temporal, resource=Resource.LAUNCH),
        evidence={
            "launch_slowdown": rounded(report.launch_slowdown),
            "stall_s_per_step": rounded(stall),
            "unexplained_s_per_step": rounded(unexplained),
            "stall_share_of_unexplained": rounded(share),
            "stall_share_of_its_steps_unexplained": rounded(in_steps),
            "stall_share_of_lost_time": rounded(lost_share),
            "stall_share_of_its_steps_lost_time": rounded(lost_in_steps),
            "workers_stalling": len(cells),
            "steps_stalling": len(steps_hit),
        },
        summary=summary,
        categories=categories_for(CauseId.DATALOADER_STALL),
    )
