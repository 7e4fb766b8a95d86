"""Scenarios shared between detectors, remedies and marginal gains: ``Probe.shares`` (the ``rem``
and ``add`` views in one batch) and ``Probe.means_of`` over ``TraceStats.cached`` vectors (one run
per shared scenario) against the plain one-vector-at-a-time runs."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers import whatif
from diagnosers.detectors import compute_stats
from diagnosers.detectors.base import Probe
from diagnosers.synth import ScenarioSpec, generate


def _stats():  # type: ignore[no-untyped-def]
    trace = generate(
        ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, seed=3, scenarios=["faulty-machine"])
    ).trace
    return compute_stats(trace, whatif.build_engine(trace))


def _count_runs(probe: Probe) -> list[int]:
    """Wrap the probe's engine so that each simulation call appends its number of scenarios to
    the returned list."""
    runs: list[int] = []
    run = probe.engine.simulate

    def counting(d, **kw):  # type: ignore[no-untyped-def]
        runs.append(len(np.atleast_2d(d)))
        return run(d, **kw)

    probe.engine.simulate = counting  # type: ignore[method-assign]
    return runs


def test_shares_match_share_and_add_share_run_alone() -> None:
    stats = _stats()
    probe = stats.probe
    assert probe is not None
    rng = np.random.default_rng(1)
    removed = np.where(rng.random(len(probe.original)) < 0.3, probe.ideal, probe.original)
    put_back = probe.ideal * np.exp(rng.normal(0.0, 0.1, len(probe.ideal)))
    plain = Probe(probe.engine)
    assert probe.shares(removed, put_back) == (plain.share(removed), plain.add_share(put_back))


def test_a_cached_scenario_runs_once_and_gives_the_plain_value() -> None:
    stats = _stats()
    probe = stats.probe
    assert probe is not None
    made: list[int] = []

    def make() -> np.ndarray:
        made.append(1)
        return probe.original * 0.9

    shared = stats.cached("scaled", make)
    assert stats.cached("scaled", make) is shared and len(made) == 1
    assert not shared.flags.writeable  # nobody can change a scenario others reuse
    with pytest.raises(ValueError):
        shared[0] = 1.0
    runs = _count_runs(probe)
    other = probe.original * 1.1  # writeable: never memoised by identity
    first = probe.means_of([shared, other])
    again = probe.means_of([other, shared])
    assert runs == [2, 1]  # the shared one is not run again, the writeable one is
    want = Probe(probe.engine).mean_times(np.stack([shared, other]))
    assert np.array_equal(first, want) and np.array_equal(again, want[::-1])
    # the maker's own array stays writeable: the cache holds a read-only view
    base = probe.original * 1.0
    view = stats.cached("base", lambda: base)
    assert base.flags.writeable and not view.flags.writeable


def test_announced_scenarios_ride_along_with_the_next_batch() -> None:
    stats = _stats()
    probe = stats.probe
    assert probe is not None
    later = [stats.cached(("later", f), lambda f=f: probe.original * f) for f in (0.8, 0.9)]
    again = [stats.cached(("again", f), lambda f=f: probe.original * f) for f in (0.6, 0.5)]
    own = np.stack([probe.original * 1.2, probe.original * 1.3])
    plain = Probe(probe.engine)  # lone runs, made before the counting starts
    want_later, want_again = plain.mean_times(np.stack(later)), plain.mean_times(np.stack(again))
    want_own = plain.mean_times(own)
    runs = _count_runs(probe)
    probe.ahead([*later, probe.original * 0.7])  # the writeable one is not announced
    first = probe.mean_times(own)
    assert runs == [4]  # the two announced ride along; the caller gets its own two back
    assert np.array_equal(first, want_own)
    assert np.array_equal(probe.means_of(later), want_later)
    assert runs == [4]  # nothing run again
    # announced but never carried by another batch: run once by the one who asks, not twice
    probe.ahead(again)
    assert np.array_equal(probe.means_of(again), want_again)
    assert runs == [4, 2]


def test_a_shared_statistic_is_computed_once() -> None:
    """``TraceStats.shared``: the microbatch coherence test, which the sequence-length and the
    faulty-machine detectors may both ask for, runs once per trace statistics."""
    from diagnosers.detectors import sequence_length

    stats = _stats()
    calls: list[int] = []
    plain = sequence_length._coherence

    def counted(st):  # type: ignore[no-untyped-def]
        calls.append(1)
        return plain(st)

    sequence_length._coherence = counted  # type: ignore[assignment]
    try:
        first = sequence_length.microbatch_coherence(stats)
        again = sequence_length.microbatch_coherence(stats)
    finally:
        sequence_length._coherence = plain  # type: ignore[assignment]
    assert first == again == plain(stats) and len(calls) == 1
