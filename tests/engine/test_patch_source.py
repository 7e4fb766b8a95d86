"""A duration source may answer with a ``simulate.Patch`` (one base for most scenarios, a few
patched rows): the pass must give bit-identical step times to the same durations materialised as
full ``(K, D, S)`` arrays, whatever the shapes (narrow starts, DP-synchronised groups, a patch
on either side), with and without ``keep``."""

from __future__ import annotations

import dag_oracle
import numpy as np
import pytest

from diagnosers.graph import template_from_graph
from diagnosers.simulate import Patch, mixed_source, simulate


@pytest.mark.parametrize("seed", range(10))
def test_patched_sources_equal_materialised_ones(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    deps, groups, dp_sync = dag_oracle.random_graph(
        rng, int(rng.integers(5, 16)), sizes=(1, 1, 1, 2, 3), singleton_group_p=0.2
    )
    n = len(deps)
    k, dp, steps = int(rng.integers(2, 7)), int(rng.integers(1, 4)), 2
    t = template_from_graph(deps, groups, dp_sync, dp=dp, n_steps=steps)
    shapes = [(1, 1, 1), (1, dp, steps), (1, dp, 1), (1, 1, steps)]
    patches: list[Patch | np.ndarray] = []
    for _ in range(n):
        if rng.random() < 0.2:
            patches.append(rng.uniform(0, 1, size=shapes[int(rng.integers(len(shapes)))]))
            continue
        base = rng.uniform(0, 1, size=shapes[int(rng.integers(len(shapes)))])
        rows = np.flatnonzero(rng.random(k) < 0.4)
        vshape = shapes[int(rng.integers(len(shapes)))]
        values = rng.uniform(0, 1, size=(len(rows), *vshape[1:]) if rng.random() < 0.5 else vshape)
        patches.append(Patch(base, rows, values))

    def materialised(v: int) -> np.ndarray:
        p = patches[v]
        if not isinstance(p, Patch):
            return p
        full = np.broadcast_to(p.base, (k, dp, steps)).copy()
        full[p.rows] = p.values
        return full

    for keep in (False, True):
        got = simulate(t, lambda v: patches[v], (k, dp, steps), keep=keep)
        want = simulate(t, materialised, (k, dp, steps), keep=keep)
        assert np.array_equal(got.step_times, want.step_times)
        if keep:
            assert np.array_equal(got.end, want.end) and np.array_equal(got.start, want.start)


def test_mixed_source_patches_the_smaller_side() -> None:
    a = np.arange(12.0).reshape(3, 2, 2)
    b = np.full((3, 1, 1), -1.0)
    use_b = np.array([[True, False, False, False], [True, True, True, False], [True] * 4])
    get = mixed_source(a, b, use_b)
    p0, p1 = get(0), get(1)
    assert isinstance(p0, Patch) and list(p0.rows) == [0] and p0.base is not None
    assert np.array_equal(p0.base, a[0][None]) and np.array_equal(p0.values, b[0][None])
    assert isinstance(p1, Patch) and list(p1.rows) == [3] and np.array_equal(p1.base, b[1][None])
    assert not isinstance(get(2), Patch)

