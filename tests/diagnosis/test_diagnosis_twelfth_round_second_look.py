"""A second look at the thirteenth real part after its one run (docs/ACCURACY.md, "After the run:
a second look at the thirteenth part"): its healthy 4x2 recording was named a faulty machine by
the fast-op reading alone (``faulty_machine.fast_op_outlier_z`` at ``OUTLIER_Z``) while the
worker's compute stood inside the job's noise floor. That reading alone now needs the compute to
stand out of the floor at all (``FAST_OUTLIER_SW_Z``). Pinned on the recording, on the seen slow
machines the fast-op reading carries, and on the part's score (a second look, not a fresh figure:
the run-once figure stays 17 of 20)."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors import faulty_machine as fm
from diagnosers.vocab import CauseId
from tests._support.recorded import truth, widened_causes, widened_folder, widened_part_score, widened_stats


def test_the_healthy_4x2_worker_has_slow_fastest_ops_but_compute_inside_the_floor() -> None:
    folder = widened_folder("heldout13", "healthy-4x2")
    st = widened_stats(folder)
    every = np.ones(st.n_steps, dtype=bool)
    # rank 3 (dp 3, first stage): its fastest ops alone would pass the fast-op bar ...
    assert fm.fast_op_outlier_z(st, [(3, 0)], every) >= fm.OUTLIER_Z
    # ... and no faulty machine (nor GC) is named
    assert all(c not in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) for c, _ in widened_causes(folder))


@pytest.mark.parametrize(
    ("part", "name"),
    [
        ("heldout4", "slow-rank-3x2"),
        ("heldout5", "slow-rank-2x3"),
        ("heldout8", "slow-rank-last-3x2"),
        ("heldout9", "onset-2x3"),
        ("heldout12", "slow-rank-2x2"),
    ],
)
def test_slow_machines_carried_by_their_fastest_ops_are_still_named(part: str, name: str) -> None:
    folder = widened_folder(part, name)
    causes = widened_causes(folder)
    assert causes, f"{part}/{name}: no cause"
    top, ranks = causes[0]
    assert top == CauseId.FAULTY_MACHINE
    assert ranks == [int(str(truth(folder)["slow_rank"]))]


def test_the_thirteenth_part_on_the_second_look() -> None:
    scored, _, missed = widened_part_score("heldout13", 20)
    # 19 since the thirteenth round reads the partition S hides (layers-2x4)
    assert sum(s.right for s in scored.values()) == 19
    assert set(missed) == {"healthy-2x2"}
    assert not any(s.false_machine_or_gc for s in scored.values() if s.healthy)
    assert not any(s.silent_miss for s in scored.values())
