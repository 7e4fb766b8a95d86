"""Scenarios the report runs in one shared pass give exactly their numbers from passes of their own."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.readers import ReadOptions, load_trace
from diagnosers.samples import artifact_trace
from diagnosers.simulate import mixed_source, simulate
from diagnosers.whatif import _whole_job_runs, build_engine, report_json


@pytest.mark.parametrize("name", ["ST", "AR", "SE"])
def test_whole_job_pass_equals_its_own_passes(name: str) -> None:
    trace = load_trace([artifact_trace(name)], ReadOptions())
    eng = build_engine(trace)
    whole = _whole_job_runs(eng)
    t, orig, ideal3 = eng.template, eng.orig_dense, eng.ideal_node[:, None, None]
    ideal = simulate(t, lambda v: eng.ideal_node[v], (1, 1, 1)).step_times[0, 0]
    nodelay = eng.simulate_dense(lambda v: orig[v][None], 1)[0]
    assert eng.ideal_step_time == ideal and np.array_equal(eng.nodelay_step_times, nodelay)
    for i in range(t.pp):
        on_stage = (t.stage == i)[:, None]
        put_back = eng.simulate_dense(mixed_source(ideal3, orig, on_stage), 1)[0]
        idealised = eng.simulate_dense(mixed_source(orig, ideal3, on_stage), 1)[0]
        assert np.array_equal(whole.put_back[len(whole.type_keys) + i], put_back)
        assert np.array_equal(whole.stage_idealised[i], idealised)


@pytest.mark.parametrize("name", ["ST", "SE"])
def test_shared_rank_and_worker_pass_equals_separate_ones(name: str) -> None:
    """With every worker run exactly, the DP-rank put-backs and the per-worker runs share a pass;
    asking for the top K = every worker takes them in passes of their own: the same report."""
    trace = load_trace([artifact_trace(name)], ReadOptions())
    shared = report_json(trace)
    n_workers = trace.meta.dp * trace.meta.pp
    apart = report_json(trace, exact_top_k=n_workers)
    assert apart["attribution"].pop("by_worker_exact_top_k") is None
    assert shared["attribution"].pop("by_worker_exact_top_k") is None
    assert shared == apart


@pytest.mark.parametrize("seed", range(12))
def test_columns_held_apart_equal_the_stacked_pass(seed: int) -> None:
    """``simulate_columns`` (each DP column its own array, narrow where it can be) gives the step
    times of ``simulate`` with the same columns stacked on the D axis, bit for bit, on random
    graphs with DP-synchronised groups and columns of every shape (one constant column, as the
    per-worker runs give)."""
    import dag_oracle

    from diagnosers.graph import template_from_graph
    from diagnosers.simulate import simulate_columns

    rng = np.random.default_rng(300 + seed)
    deps, groups, dp_sync = dag_oracle.random_graph(
        rng, int(rng.integers(5, 16)), sizes=(1, 1, 1, 2, 3), singleton_group_p=0.2
    )
    n_cols, k, steps = int(rng.integers(1, 4)), int(rng.integers(1, 6)), 3
    t = template_from_graph(deps, groups, dp_sync, dp=n_cols, n_steps=steps)
    shapes = [(1, 1, 1), (k, 1, steps), (1, 1, steps), (k, 1, 1)]
    per_node = [
        tuple(
            rng.uniform(0, 1, size=(1, 1, 1) if c == n_cols - 1 else shapes[int(rng.integers(len(shapes)))])
            for c in range(n_cols)
        )
        for _ in range(len(deps))
    ]
    stacked = [np.concatenate([np.broadcast_to(x, (k, 1, steps)) for x in cols], axis=1) for cols in per_node]
    want = simulate(t, lambda v: stacked[v], (k, n_cols, steps)).step_times
    got = simulate_columns(t, lambda v: per_node[v], n_cols, k, steps)
    assert got.shape == (k, steps) and np.array_equal(got, want)


@pytest.mark.parametrize("name", ["ST", "AR", "SE"])
def test_worker_runs_equal_the_stacked_two_column_pass(name: str) -> None:
    """The per-worker runs with the other DP ranks held as their own column are those of the
    two-column pass that materialises them in every scenario."""
    from diagnosers.whatif import ALL_STAGES, _worker_runs

    eng = build_engine(load_trace([artifact_trace(name)], ReadOptions()))
    t, orig, ideal = eng.template, eng.orig_dense, eng.ideal_node
    dp, ns = eng.shape
    workers = [(d, ALL_STAGES) for d in range(dp)] + [(d, s) for s in range(t.pp) for d in range(dp)]
    w_dp = np.array([w[0] for w in workers])
    w_st = np.array([w[1] for w in workers])
    dcol = 2 if dp > 1 else 1

    def src(v: int) -> np.ndarray:
        out = np.full((len(workers), dcol, ns), ideal[v])
        idx = np.flatnonzero((w_st == t.stage[v]) | (w_st == ALL_STAGES))
        out[idx, 0, :] = orig[v][w_dp[idx]]
        return out

    want = eng.simulate_dense(src, len(workers), dp=dcol)
    assert np.array_equal(_worker_runs(eng, workers), want)
