"""The method's thresholds and the verdicts computed from them (fidelity, measured loss); no pydantic.

Part of the shared vocabulary (``diagnosers.vocab`` re-exports every name here); kept in a module
of their own so that ``analyze``, which needs the thresholds but none of the vocabulary's pydantic
models, does not pay for importing pydantic.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

# Thresholds of the method (METHOD.md A5): below DECOMPOSE_THRESHOLD the artifact skips the
# decomposition; at or above STRAGGLING_THRESHOLD a job counts as straggling.
DECOMPOSE_THRESHOLD = 1.03
STRAGGLING_THRESHOLD = 1.1
DEFAULT_GPUS_PER_HOST = 8


class FidelityVerdict(StrEnum):
    """How far the simulated job can be trusted for this trace (``Fidelity.verdict``)."""

    GOOD = "good"
    DEGRADED = "degraded"
    UNRELIABLE = "unreliable"


# Fidelity thresholds on the *unexplained* simulation error: the measured step time's excess over
# the simulated one (relative to the simulated one, as the study's error), after the launch gaps a
# found cause accounts for (a dataloader stall's idle time is explained, not a model failure).
# - Up to FIDELITY_GOOD_MAX (3%) the verdict is good: that is the method's own noise floor (a job
#   with S below DECOMPOSE_THRESHOLD = 1.03 is not decomposed at all), so time the model misses
#   below it cannot change what the analysis concludes.
# - Above FIDELITY_UNRELIABLE_ABOVE (5%) it is unreliable: the study discards every trace whose
#   simulation error exceeds 5% (METHOD.md A4), because the simulated job no longer stands for the
#   real one. In between it is degraded: the findings hold, but a cause or a speedup near a
#   threshold (S near 1.1, a share near 25%) may move by the unexplained amount.
FIDELITY_GOOD_MAX = DECOMPOSE_THRESHOLD - 1.0
FIDELITY_UNRELIABLE_ABOVE = 0.05


def fidelity_fields(
    simulation_error: float, explained_error: float = 0.0, explained_by: Sequence[str] = ()
) -> dict[str, Any]:
    """The fields of a ``report.Fidelity`` for a simulation error of which ``explained_error`` is
    accounted for, in the model's field order.

    Only a positive error (the trace is slower than the model) can be explained by launch gaps;
    the explained part is capped at the error. The verdict compares the unexplained magnitude with
    ``FIDELITY_GOOD_MAX`` and ``FIDELITY_UNRELIABLE_ABOVE``.
    """
    err = float(simulation_error)
    explained = min(max(float(explained_error), 0.0), max(err, 0.0))
    unexplained = abs(err - explained)
    by = list(explained_by) if explained > 0 else []
    pct = f"{unexplained * 100:.1f}%"
    if explained > 0:
        source = (
            f"of a {err * 100:.1f}% simulation error, {explained * 100:.1f}% is the launch time of "
            f"{', '.join(by)}; {pct} is unexplained"
        )
    else:
        source = f"the measured step time is {pct} {'above' if err >= 0 else 'below'} the simulated one"
    if unexplained > FIDELITY_UNRELIABLE_ABOVE:
        verdict = FidelityVerdict.UNRELIABLE
        reason = (
            f"{source}, above the {FIDELITY_UNRELIABLE_ABOVE * 100:.0f}% at which the study discards a "
            "trace: the what-if results do not describe this job, so causes and speedups are only "
            "hints and nothing destructive is recommended"
        )
    elif unexplained > FIDELITY_GOOD_MAX:
        verdict = FidelityVerdict.DEGRADED
        reason = (
            f"{source}, above the {FIDELITY_GOOD_MAX * 100:.0f}% noise floor: findings near a "
            "threshold may move by that much"
        )
    else:
        verdict = FidelityVerdict.GOOD
        reason = f"{source}, within the {FIDELITY_GOOD_MAX * 100:.0f}% noise floor"
    return {
        "verdict": verdict,
        "unexplained_error": round(unexplained, 6),
        "reason": reason,
        "simulation_error": round(err, 6),
        "explained_error": round(explained, 6),
        "explained_by": by,
    }


def measured_loss(actual: dict[str, float], ideal: dict[str, float]) -> float:
    """``1 - mean ideal / mean measured step time`` (0 when the measured time is not above ideal)."""
    a = sum(actual.values()) / max(len(actual), 1)
    i = sum(ideal.values()) / max(len(ideal), 1)
    return max(0.0, 1.0 - i / a) if a > 0 else 0.0
