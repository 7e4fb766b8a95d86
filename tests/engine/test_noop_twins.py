"""No-op P2P records join their batched twin's group (``join_batched_noops``), checked by brute force.

An interleaved job from the project's generator records no-op sends and recvs at the model's first
and last chunk inside batched calls, so they share start and duration with a real op of the other
direction on the same worker: the case the twin search exists for.
"""

from __future__ import annotations

import numpy as np

from diagnosers.graph import P2P_TYPES, build_template
from diagnosers.synth import ScenarioSpec, generate
from diagnosers.synth.spec import Schedule


def test_noop_records_join_exactly_the_twins_a_full_scan_finds() -> None:
    trace = generate(
        ScenarioSpec(dp=2, pp=4, vpp=2, microbatches=8, steps=2, schedule=Schedule.INTERLEAVED, seed=3)
    ).trace
    joined, apart = build_template(trace), build_template(trace, join_batched_noops=False)
    assert joined.no_ops > 0
    # per node: its timing on dp rank 0 in the first step (what the graph compares)
    ops = trace.ops
    first = (joined.step_of_row == 0) & (joined.dp_of_row == 0)
    start, end = np.empty(joined.n_nodes), np.empty(joined.n_nodes)
    start[joined.node_of_row[first]] = ops.start_ts[first]
    end[joined.node_of_row[first]] = ops.start_ts[first] + ops.duration[first]
    is_p2p = np.isin(joined.optype, P2P_TYPES)
    size = np.bincount(apart.group[apart.group >= 0], minlength=len(apart.groups))
    noops = [v for v in range(joined.n_nodes) if is_p2p[v] and size[apart.group[v]] == 1]
    valid = [u for u in range(joined.n_nodes) if is_p2p[u] and size[apart.group[u]] == 2]
    assert len(noops) == joined.no_ops
    n_joined = 0
    for v in noops:
        twins = [
            u
            for u in valid
            if joined.stage[u] == joined.stage[v]
            and joined.optype[u] != joined.optype[v]
            and start[u] == start[v]
            and end[u] == end[v]
        ]
        members = joined.groups[joined.group[v]]
        if twins:
            n_joined += 1
            assert len(members) > 1 and any(u in members for u in twins)
        else:
            assert members == [v]
    assert n_joined > 0
    assert len(apart.groups) - len(joined.groups) == n_joined
