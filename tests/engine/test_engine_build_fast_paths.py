"""The engine build's shortcuts against the plain computations they replace."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.graph import CLAMP_NEG, build_template
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.samples import artifact_trace
from diagnosers.whatif import build_engine


def _plain_dense(t, values, fill=np.nan):  # type: ignore[no-untyped-def]
    out = np.full(t.n_nodes * t.dp * len(t.steps), fill)
    out[t.flat_index] = values
    return out.reshape(t.n_nodes, t.dp, len(t.steps))


@pytest.mark.parametrize("shuffle", [False, True])
def test_dense_through_the_step_major_layout_is_the_plain_scatter(shuffle: bool) -> None:
    trace = load_trace([artifact_trace("AR")], ReadOptions())
    if shuffle:  # rows in no block order: every write lands anywhere
        trace.ops = trace.ops.take(np.random.default_rng(4).permutation(len(trace.ops)))
    t = build_template(trace)
    values = np.random.default_rng(1).uniform(0, 1, len(trace.ops))
    got = t.dense(values)
    assert got.flags.c_contiguous and got.shape == (t.n_nodes, t.dp, len(t.steps))
    assert np.array_equal(got, _plain_dense(t, values))
    # a partial scatter keeps the fill where no row lands
    some = np.flatnonzero(np.arange(len(values)) % 3 == 0)
    t.step_of_row, t.dp_of_row, t.node_of_row = t.step_of_row[some], t.dp_of_row[some], t.node_of_row[some]
    t._flat = t._step_major = None
    assert np.array_equal(t.dense(values[some], fill=-1.0), _plain_dense(t, values[some], fill=-1.0))


@pytest.mark.parametrize("name", ["ST", "SE"])
def test_launch_delays_are_the_plain_formula(name: str) -> None:
    """start minus the latest end over a node's dependencies (a fancy index and a max), clamped."""
    eng = build_engine(load_trace([artifact_trace(name)], ReadOptions()))
    t, start = eng.template, eng.start_dense
    end = start + eng.template.dense(eng.trace.ops.duration)
    want = np.empty_like(start)
    for v in range(t.n_nodes):
        want[v] = start[v] - end[t.deps[v]].max(axis=0) if t.deps[v] else start[v]
    want[want <= -CLAMP_NEG] = 0.0
    assert np.array_equal(eng.launch_dense, want)
