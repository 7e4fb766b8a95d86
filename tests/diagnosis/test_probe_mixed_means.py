"""``Probe.mixed_means`` (both views of a mask in one batch of what-if runs) against the plain
computation: ``mean_times`` of the ``np.where`` duration vectors, one scenario at a time."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers import whatif
from diagnosers.detectors.base import Probe
from diagnosers.synth import ScenarioSpec, generate


@pytest.mark.parametrize("one_pass", [True, False])
def test_mixed_directions_match_one_vector_at_a_time(one_pass: bool) -> None:
    trace = generate(
        ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, seed=5, scenarios=["faulty-machine"])
    ).trace
    engine = whatif.build_engine(trace)
    probe = Probe(engine)
    assert probe._complement_is_same  # a regular generated job fills every cell
    # the other way (one batch per direction) is the one irregular traces take
    probe._complement_is_same = one_pass
    rng = np.random.default_rng(0)
    n = len(probe.original)
    masks = [rng.random(n) < q for q in (0.05, 0.3, 0.7)] + [np.zeros(n, bool), np.ones(n, bool)]
    inside = [True, False, True, False, False]
    directions = inside + [not x for x in inside]
    got = probe.mixed_means([*masks, *masks], directions)
    plain = Probe(engine)
    ideal, original = probe.ideal, probe.original
    want = [
        plain.mean_times(np.where(m, ideal, original) if x else np.where(m, original, ideal))[0]
        for m, x in zip([*masks, *masks], directions, strict=True)
    ]
    assert np.array_equal(got, np.array(want))


def test_directions_must_match_the_masks() -> None:
    trace = generate(ScenarioSpec(dp=2, pp=2, microbatches=4, steps=2, seed=9)).trace
    probe = Probe(whatif.build_engine(trace))
    with pytest.raises(ValueError, match="2 masks but 1 directions"):
        probe.mixed_means([np.zeros(len(probe.original), bool)] * 2, [True])
