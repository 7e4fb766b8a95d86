"""The dependency model on real and edited traces: the edges METHOD.md A2 lists, no-op P2P records,
VPP, the tail adapting to the op types present, overlapped DP reduction, and graph errors."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from diagnosers.graph import Template, build_template
from diagnosers.model import OPTYPE_CODE, OPTYPES, Trace, TraceError
from diagnosers.readers import load_trace
from diagnosers.readers.normalize import normalize
from diagnosers.samples import artifact_trace
from diagnosers.synth import ScenarioSpec, generate
from diagnosers.whatif import analyze


@cache
def st() -> Trace:
    return load_trace([artifact_trace("ST")])


def deps_of(t: Template, name: str) -> set[str]:
    v = next(i for i in range(t.n_nodes) if t.name(i) == name)
    return {t.name(u) for u in t.deps[v]}


def group_of(t: Template, name: str) -> set[str]:
    v = next(i for i in range(t.n_nodes) if t.name(i) == name)
    return {t.name(m) for m in t.groups[int(t.group[v])]} if t.group[v] >= 0 else set()


def edited(trace: Trace, keep: np.ndarray | None = None, extra: dict[str, list] | None = None) -> Trace:
    """Re-normalise a trace after dropping rows (``keep``) and appending rows (``extra``)."""
    cols = {k: v for k, v in trace.ops.columns().items() if k != "seq_id"}
    cols["optype"] = trace.ops.optype_names().astype(object)
    if keep is not None:
        cols = {k: v[keep] for k, v in cols.items()}
    if extra:
        cols = {k: np.concatenate([v, np.asarray(extra[k], dtype=v.dtype)]) for k, v in cols.items()}
    return normalize(cols, trace.meta, source="edited")


def test_st_edges_match_the_method() -> None:
    t = build_template(st())
    assert deps_of(t, "forward-compute_0_0") == {"params-all-gather_0_0"}
    assert deps_of(t, "forward-send_2_0") == {"forward-compute_2_0", "forward-send_1_0"}
    assert deps_of(t, "backward-recv_0_0") == {"forward-compute_2_0"}
    assert "backward-recv_1_0" in deps_of(t, "backward-compute_1_0")
    assert deps_of(t, "gc_0_0") == {"backward-compute_3_0"}
    assert deps_of(t, "layernorm-grads-all-reduce_0_0") == {"gc_0_0"}
    assert deps_of(t, "embedding-grads-all-reduce_0_0") == {"layernorm-grads-all-reduce_0_0"}
    assert deps_of(t, "grads-reduce-scatter_0_0") == {
        "embedding-grads-all-reduce_0_0",
        "params-all-gather_0_0",
    }
    assert deps_of(t, "optimizer-clip-main-grad_0_0") == {"grads-reduce-scatter_0_0"}
    assert deps_of(t, "optimizer_0_0") == {"optimizer-clip-main-grad_0_0"}
    # middle stages have no embedding all-reduce: LN -> reduce-scatter
    assert deps_of(t, "grads-reduce-scatter_0_1") == {
        "layernorm-grads-all-reduce_0_1",
        "params-all-gather_0_1",
    }
    assert group_of(t, "forward-send_0_0") == {"forward-send_0_0", "forward-recv_0_1"}
    assert group_of(t, "backward-send_3_2") == {"backward-send_3_2", "backward-recv_3_1"}
    assert group_of(t, "embedding-grads-all-reduce_0_0") == {
        "embedding-grads-all-reduce_0_0",
        "embedding-grads-all-reduce_0_3",
    }
    assert group_of(t, "optimizer-clip-main-grad_0_2") == {
        f"optimizer-clip-main-grad_0_{s}" for s in range(4)
    }
    clip = int(t.group[next(i for i in range(t.n_nodes) if t.name(i) == "optimizer-clip-main-grad_0_0")])
    assert t.group_dp_sync[clip]
    assert t.group[next(i for i in range(t.n_nodes) if t.name(i) == "layernorm-grads-all-reduce_0_0")] == -1
    assert t.no_ops == 0 and len(t.steps) == 32


def test_type1_no_op_recv_is_its_own_group_and_changes_little() -> None:
    trace = st()
    ops = trace.ops
    # a forward-recv on stage 1 posted after the last forward compute of every step and DP rank
    last_fwd = {}
    for i in np.flatnonzero((ops.stage == 1) & (ops.optype == OPTYPE_CODE["forward-compute"])):
        key = (int(ops.dp_rank[i]), int(ops.step[i]))
        last_fwd[key] = max(last_fwd.get(key, -1.0), float(ops.start_ts[i]))
    rank_of = {(int(d), int(s)): int(r) for d, s, r in zip(ops.dp_rank, ops.stage, ops.rank, strict=True)}
    extra: dict[str, list] = {
        k: []
        for k in ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "mc", "gmc", "mb_id")
    }
    for (d, step), t0 in last_fwd.items():
        for k, v in (
            ("dp_rank", d),
            ("stage", 1),
            ("rank", rank_of[(d, 1)]),
            ("step", step),
            ("optype", "forward-recv"),
            ("start_ts", t0 + 0.01),
            ("duration", 0.0005),
            ("mc", -1),
            ("gmc", -1),
            ("mb_id", -1),
        ):
            extra[k].append(v)
    trace2 = edited(trace, extra=extra)
    t = build_template(trace2)
    assert t.no_ops == 1
    assert group_of(t, "forward-recv_4_1") == {"forward-recv_4_1"}
    r = analyze(trace2)
    assert r.slowdown == pytest.approx(1.1787021836556841, rel=0.005)


def test_tail_adapts_to_missing_op_types() -> None:
    trace = st()
    names = trace.ops.optype_names()
    keep = ~np.isin(names, ["gc", "layernorm-grads-all-reduce", "embedding-grads-all-reduce"])
    t = build_template(edited(trace, keep=keep))
    assert deps_of(t, "grads-reduce-scatter_0_0") == {"backward-compute_3_0", "params-all-gather_0_0"}
    assert deps_of(t, "grads-reduce-scatter_0_3") == {"backward-compute_3_3", "params-all-gather_0_3"}
    r = analyze(edited(trace, keep=keep))
    assert set(r.attribution.by_optype) == {
        "forward-compute",
        "backward-compute",
        "optimizer",
        "forward-pp-comm",
        "backward-pp-comm",
        "params-all-gather",
        "grads-reduce-scatter",
        "optimizer-clip-main-grad",
    }
    assert r.slowdown > 1.1


def test_overlapped_dp_reduction() -> None:
    trace = st()
    ops = trace.ops
    rs = np.flatnonzero(ops.optype == OPTYPE_CODE["grads-reduce-scatter"])
    extra: dict[str, list] = {
        "dp_rank": list(ops.dp_rank[rs]),
        "stage": list(ops.stage[rs]),
        "rank": list(ops.rank[rs]),
        "step": list(ops.step[rs]),
        "optype": ["separate-grads-all-reduce"] * len(rs),
        "start_ts": list(ops.start_ts[rs] + ops.duration[rs]),
        "duration": [0.001] * len(rs),
        "mc": [-1] * len(rs),
        "gmc": [-1] * len(rs),
        "mb_id": [-1] * len(rs),
    }
    trace2 = edited(trace, extra=extra)
    t = build_template(trace2)
    # each chunk's reduce-scatter waits for the chunk's last backward; the tail runs
    # LN -> emb -> separate all-reduce -> clip, with LN also after the last reduce-scatter
    assert "backward-compute_3_1" in deps_of(t, "grads-reduce-scatter_0_1")
    assert deps_of(t, "layernorm-grads-all-reduce_0_1") == {"gc_0_1", "grads-reduce-scatter_0_1"}
    assert deps_of(t, "separate-grads-all-reduce_0_1") == {"layernorm-grads-all-reduce_0_1"}
    assert deps_of(t, "optimizer-clip-main-grad_0_1") == {"separate-grads-all-reduce_0_1"}
    sep = int(t.group[next(i for i in range(t.n_nodes) if t.name(i) == "separate-grads-all-reduce_0_1")])
    assert t.group_dp_sync[sep]
    assert analyze(trace2).slowdown > 1.1


def test_interleaved_vpp_no_ops_and_resimulation() -> None:
    job = generate(ScenarioSpec(dp=2, pp=4, vpp=2, schedule="interleaved", microbatches=8, steps=2))
    t = build_template(job.trace)
    assert t.vpp == 2
    assert t.no_ops > 0  # sends/recvs at the model's first and last chunk
    # stage 0's forward recv for its first chunk has no peer: a no-op; its second chunk receives
    # from the last stage (the pipeline wraps around)
    assert all(
        group_of(t, t.name(v)) != set()
        for v in range(t.n_nodes)
        if OPTYPES[int(t.optype[v])] in ("forward-send", "forward-recv")
    )
    wrapped = [
        t.name(v)
        for v in range(t.n_nodes)
        if t.name(v).startswith("forward-recv_")
        and t.name(v).endswith("_0")
        and any(m.endswith("_3") for m in group_of(t, t.name(v)))
    ]
    assert wrapped
    r = analyze(job.trace)
    assert not [n for n in r.notes if "does not reproduce" in n]
    assert r.slowdown < 1.03  # a healthy job


def test_steps_with_different_ops_are_rejected() -> None:
    trace = st()
    ops = trace.ops
    drop = np.flatnonzero((ops.step == 25) & (ops.optype == OPTYPE_CODE["gc"]))
    keep = np.ones(len(ops), dtype=bool)
    keep[drop] = False
    with pytest.raises(TraceError, match="every step must carry the same ops") as info:
        build_template(edited(trace, keep=keep))
    assert info.value.step == 25 and info.value.op == "gc"


def test_unpaired_p2p_is_rejected() -> None:
    trace = st()
    ops = trace.ops
    # drop the last backward-send of stage 2 in every step: stage 1's recvs lose their peer
    drop = (ops.stage == 2) & (ops.optype == OPTYPE_CODE["backward-send"]) & (ops.seq_id == 3)
    with pytest.raises(TraceError, match=r"cannot be paired|no .* peer") as info:
        build_template(edited(trace, keep=~drop))
    assert info.value.op in ("backward-send", "backward-recv")
    assert info.value.rank is not None


def test_missing_first_forward_recv_on_stage_0_is_tolerated() -> None:
    job = generate(ScenarioSpec(dp=2, pp=4, vpp=2, schedule="interleaved", microbatches=8, steps=2))
    ops = job.trace.ops
    first = (ops.stage == 0) & (ops.optype == OPTYPE_CODE["forward-recv"]) & (ops.seq_id == 0)
    assert first.sum() == 4  # one per DP rank and step
    trace2 = edited(job.trace, keep=~first)
    t = build_template(trace2)
    # recv #k now feeds forward compute #k+1 on stage 0
    assert "forward-recv_0_0" in deps_of(t, "forward-compute_1_0")
    r1, r2 = analyze(job.trace), analyze(trace2)
    assert r2.slowdown == pytest.approx(r1.slowdown, rel=0.01)
