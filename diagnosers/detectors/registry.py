"""The detector registry: same-shaped functions ``(report, stats) -> CauseMatch | None``.

Each cause module registers its function with :func:`register`; :func:`detect_all` runs every
registered detector and returns the matches ranked by confidence (several causes may hold at once).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from diagnosers.detectors.base import CauseMatch, TraceStats
from diagnosers.vocab import CauseId

if TYPE_CHECKING:
    from diagnosers.report_view import Report

Detector = Callable[["Report", TraceStats], CauseMatch | None]

DETECTORS: dict[CauseId, Detector] = {}
# Findings tried only when no detector matched (e.g. one worker far outside the job's noise).
FALLBACKS: list[Detector] = []
# Findings tried beside the matches (a worker that the matched causes do not explain); each gets the
# matches found so far and returns one more, or None.
Beside = Callable[["Report", TraceStats, list[CauseMatch]], CauseMatch | None]
_F = TypeVar("_F", Detector, Beside)
BESIDE: list[Beside] = []
# Masked what-if scenarios a detector will ask for whatever the others find, announced before
# any detector runs (``Probe.ahead_masked``): each plan gives ``(masks, ideal_inside)``, and the
# first batch of masked runs, whichever detector asks for it, runs them along.
Plan = Callable[["Report", TraceStats], tuple[list[npt.NDArray[np.bool_]], list[bool]]]
PLANS: list[Plan] = []

# The cause modules, imported on first use so that importing the registry stays cheap.
DETECTOR_MODULES: tuple[str, ...] = (
    "stage_imbalance",
    "faulty_machine",
    "sequence_length",
    "gc_pause",
    "slow_communication",
    "dataloader",
    "fast_step",  # a fallback only: after faulty_machine's (``_in_module_order``: its outlier-worker first)
)


def register(cause: CauseId) -> Callable[[Detector], Detector]:
    """Decorator: register ``fn`` as the detector for ``cause`` (one detector per cause)."""

    def wrap(fn: Detector) -> Detector:
        DETECTORS[cause] = fn
        return fn

    return wrap


def register_fallback(fn: Detector) -> Detector:
    """Decorator: ``fn`` runs only when no detector matched (first such finding wins)."""
    FALLBACKS.append(fn)
    return fn


def register_beside(fn: Beside) -> Beside:
    """Decorator: ``fn`` runs after the detectors when some matched, with their matches."""
    BESIDE.append(fn)
    return fn


def register_plan(fn: Plan) -> Plan:
    """Decorator: ``fn`` announces the masked scenarios its detector will ask for (``PLANS``)."""
    PLANS.append(fn)
    return fn


def all_detectors() -> dict[CauseId, Detector]:
    """Every registered detector, by cause id."""
    for name in DETECTOR_MODULES:
        importlib.import_module(f"diagnosers.detectors.{name}")
    return dict(DETECTORS)


def _in_module_order(fns: list[_F]) -> list[_F]:
    """``fns`` in the order of their modules in ``DETECTOR_MODULES`` (registration order within a
    module): which finding is tried first must not hang on which module happened to import which."""
    rank = {name: i for i, name in enumerate(DETECTOR_MODULES)}
    return sorted(fns, key=lambda fn: rank.get(fn.__module__.rsplit(".", 1)[-1], len(rank)))


def detect_all(report: Report, stats: TraceStats) -> list[CauseMatch]:
    """Run every detector; matches sorted by confidence, highest first (ties: cause id order).
    With no match, the first fallback finding that holds (``register_fallback``: the
    outlier-worker finding of ``faulty_machine``). With matches, each ``register_beside`` finding
    that holds is added (a worker the matched causes leave unexplained)."""
    detectors = all_detectors()
    if stats.probe is not None:
        for plan in PLANS:
            stats.probe.ahead_masked(*plan(report, stats))
    matches = [m for fn in detectors.values() if (m := fn(report, stats)) is not None]
    if not matches:
        # Never silent while one worker stands out of the job's noise: report it as what it is.
        for fallback in _in_module_order(FALLBACKS):
            found = fallback(report, stats)
            if found is not None:
                matches = [found]
                break
    else:
        for beside in _in_module_order(BESIDE):
            found = beside(report, stats, matches)
            if found is not None:
                matches = [*matches, found]
    order = {c: i for i, c in enumerate(CauseId)}
    return sorted(matches, key=lambda m: (-m.confidence, order[m.id]))
