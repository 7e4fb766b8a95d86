"""The simulator against an independent oracle: networkx's longest path on random DAGs with groups
(the oracle graph is described in dag_oracle.py)."""

from __future__ import annotations

import dag_oracle
import networkx as nx
import numpy as np
import pytest
from dag_oracle import oracle_graph

from diagnosers.graph import template_from_graph
from diagnosers.model import TraceError
from diagnosers.simulate import mixed_source, simulate


def oracle_step_time(deps, groups, dp_sync, dur: np.ndarray) -> float:
    """Longest path for one step; ``dur`` is (n_nodes, dp)."""
    return float(nx.dag_longest_path_length(oracle_graph(deps, groups, dp_sync, dur), weight="w"))


def random_graph(
    rng: np.random.Generator, n_super: int
) -> tuple[list[list[int]], list[list[int]], list[bool]]:
    """Mostly single super-nodes, a fifth of them groups too (see dag_oracle.random_graph)."""
    return dag_oracle.random_graph(rng, n_super, sizes=(1, 1, 1, 2, 3), singleton_group_p=0.2)


@pytest.mark.parametrize("seed", range(12))
def test_simulator_matches_networkx_longest_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    deps, groups, dp_sync = random_graph(rng, n_super=int(rng.integers(4, 14)))
    n = len(deps)
    dp, steps, k = int(rng.integers(1, 4)), 2, 3
    t = template_from_graph(deps, groups, dp_sync, dp=dp, n_steps=steps)
    dur = rng.uniform(0.0, 1.0, size=(n, k, dp, steps))
    got = simulate(t, dur, (k, dp, steps)).step_times
    for kk in range(k):
        for s in range(steps):
            want = oracle_step_time(deps, groups, dp_sync, dur[:, kk, :, s])
            assert got[kk, s] == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_batched_scenarios_equal_single_runs_and_mixed_source() -> None:
    rng = np.random.default_rng(7)
    deps, groups, dp_sync = random_graph(rng, 10)
    n = len(deps)
    dp, steps = 3, 2
    t = template_from_graph(deps, groups, dp_sync, dp=dp, n_steps=steps)
    a = rng.uniform(0, 1, size=(n, dp, steps))
    b = rng.uniform(0, 1, size=(n, 1, 1))
    mask = rng.random((n, 4)) < 0.5
    batched = simulate(t, mixed_source(a, b, mask), (4, dp, steps)).step_times
    for k in range(4):
        dense = np.where(mask[:, k, None, None], np.broadcast_to(b, a.shape), a)
        single = simulate(t, dense[:, None], (1, dp, steps)).step_times[0]
        np.testing.assert_allclose(batched[k], single, rtol=1e-12)


def test_launch_delay_shifts_starts_and_keep_returns_timeline() -> None:
    # chain 0 -> 1 -> 2 with a group {1} DP-synced across 2 ranks
    t = template_from_graph([[], [0], [1]], [[1]], [True], dp=2, n_steps=1)
    dur = np.array([[1.0, 2.0], [0.5, 0.5], [1.0, 1.0]])[:, None, :, None]
    launch = np.zeros((3, 1, 2, 1))
    launch[0, 0, 0, 0] = 0.25
    res = simulate(t, dur, (1, 2, 1), launch=launch, keep=True)
    # rank 0: node0 ends 1.25, rank 1: 2.0; the synced group starts at 2.0 on both; ends 2.5
    assert res.step_times[0, 0] == pytest.approx(3.5)
    assert res.start is not None and res.end is not None
    assert res.start[0, 0, 0, 0] == pytest.approx(0.25)
    np.testing.assert_allclose(res.end[1, 0, :, 0], [2.5, 2.5])


def test_cycle_through_a_group_is_reported() -> None:
    # 0 -> 1, and 2 -> 0, with {1, 2} a group: contracted, 0 and the group wait for each other
    with pytest.raises(TraceError, match="cycle"):
        template_from_graph([[2], [0], []], [[1, 2]], [False])
