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
