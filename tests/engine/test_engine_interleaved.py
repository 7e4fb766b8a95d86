"""The interleaved (VPP) dependency model against the generator's executor (the truth it models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from diagnosers import interleaved
from diagnosers.graph import Template, build_template
from diagnosers.model import OPTYPE_CODE, OpTable, Trace
from diagnosers.readers import load_trace
from diagnosers.synth import Scenario, ScenarioSpec, Schedule, generate
from diagnosers.synth.schedule import build_programs
from diagnosers.whatif import analyze, build_engine
from diagnosers.writers import write_meta_yaml, write_native, write_parquet

PIPELINE = {OPTYPE_CODE[n] for n in ("forward-compute", "backward-compute", "forward-send", "forward-recv",
                                     "backward-send", "backward-recv")}


def _node(t: Template, name: str) -> int:
    return next(i for i in range(t.n_nodes) if t.name(i) == name)


def _deps(t: Template, name: str) -> set[str]:
    return {t.name(u) for u in t.deps[_node(t, name)]}


def _spec(**kw: object) -> ScenarioSpec:
    base: dict[str, object] = dict(dp=2, pp=4, vpp=2, microbatches=8, steps=2, schedule=Schedule.INTERLEAVED)
    base.update(kw)
    return ScenarioSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 2, 8), (4, 2, 4), (2, 3, 4), (8, 4, 16), (3, 2, 6)])
def test_program_matches_the_generators_calls(pp: int, vpp: int, m: int) -> None:
    """Same calls, same rows per call, same no-op slots as the generator's schedule."""
    gen = build_programs(pp, vpp, m, Schedule.INTERLEAVED, dp_comm=False)
    for s in range(pp):
        ours = interleaved.program(s, pp, vpp, m)
        theirs = [c for c in gen[s].calls if c.rows[0].optype in PIPELINE]
        assert len(ours) == len(theirs)
        for el, call in zip(ours, theirs, strict=True):
            if el.compute is not None:
                assert call.rows[0].optype == el.compute[0]
            else:
                assert [o for o, _, _ in el.slots] == [r.optype for r in call.rows]
                assert sum(real for _, _, real in el.slots) == len(call.ops)


def test_warmup_count_is_megatrons() -> None:
    assert [interleaved.warmup_count(s, 4, 2, 8) for s in range(4)] == [10, 8, 6, 4]
    assert interleaved.warmup_count(0, 4, 2, 4) == 8  # m == pp: all warm-up
    assert [interleaved.chunk_of(k, 4, 2, True) for k in range(9)] == [0, 0, 0, 0, 1, 1, 1, 1, 0]
    assert [interleaved.chunk_of(k, 4, 2, False) for k in range(5)] == [1, 1, 1, 1, 0]


def test_a_batched_call_blocks_the_next_compute() -> None:
    t = build_template(generate(_spec()).trace)
    assert t.rendezvous_groups
    # stage 0, steady state: F10 and B0, then one call sending both and posting both receives;
    # F11 waits for all four transfers, the send included
    assert {"forward-send_10_0", "backward-send_0_0", "forward-recv_11_0", "backward-recv_1_0"} <= _deps(
        t, "forward-compute_11_0"
    )
    # the sends of that call are posted after the backward, not right after their own forward
    assert "backward-compute_0_0" in _deps(t, "forward-send_10_0")
    # the step's tail waits for the last call, and the first call for the chunks' all-gathers
    assert "backward-send_15_3" in _deps(t, "gc_0_3")
    assert {"params-all-gather_0_1", "params-all-gather_1_1"} <= _deps(t, "forward-recv_0_1")
    # wrap-around: the last stage's first chunk-0 forward feeds stage 0's first chunk-1 forward
    fr = _node(t, "forward-recv_4_0")
    assert {t.name(m) for m in t.groups[int(t.group[fr])]} == {"forward-recv_4_0", "forward-send_0_3"}


@pytest.mark.parametrize(
    "scenario",
    [Scenario.NONE, Scenario.SEQUENCE_LENGTH_IMBALANCE, Scenario.SLOW_COMMUNICATION, Scenario.FAULTY_MACHINE],
)
def test_simulation_error_is_small(scenario: Scenario) -> None:
    """The no-delay simulation is within 1% of the generator's step times (launch gaps only)."""
    rep = analyze(generate(_spec(pp=4, vpp=3, dp=4, steps=3, scenarios=[scenario], seed=7)).trace)
    assert 0.0 <= rep.simulation_error < 0.01, rep.simulation_error
    assert not [n for n in rep.notes if "does not reproduce" in n or "does not follow" in n]


def test_healthy_interleaved_jobs_are_not_slowed() -> None:
    for seed, (pp, vpp) in enumerate([(2, 4), (4, 2), (8, 3)]):
        rep = analyze(generate(_spec(pp=pp, vpp=vpp, microbatches=2 * pp, dp=4, seed=seed)).trace)
        assert rep.slowdown <= 1.02, (pp, vpp, rep.slowdown)


def test_pair_transfer_is_the_pairs_not_the_calls() -> None:
    """Transfers batched with one over a slow link are measured to their own pair's completion, not
    to the end of their call, which waited for the slow link. Where neither side's call ends with
    the pair its completion is not recorded and the bound stays (a few pairs)."""
    job = generate(_spec(scenarios=["slow-communication"], magnitude=20, seed=3))
    loc = job.labels.causes[0].location
    d, link = loc.dp_ranks[0], set(loc.pp_ranks)
    eng = build_engine(job.trace)
    t = eng.template
    start = eng.start_dense
    end = start + t.dense(job.trace.ops.duration)
    typical = float(np.median(eng.orig_dense[[v for g in t.rendezvous_groups for v in t.groups[g]]]))
    ours, own_end = [], []
    for g in t.rendezvous_groups:
        members = t.groups[g]
        stages = {int(t.stage[v]) for v in members}
        if len(stages) == 2 and stages != link and stages & link:
            # a fast pair at one end of the slow link: its calls also hold a slow transfer
            ours.append(float(eng.orig_dense[members, d].max()))
            own_end.append(float((end[members] - start[members].max(axis=0))[:, d].max()))
    assert len(ours) >= 20
    assert np.mean(np.asarray(ours) < 3 * typical) >= 0.9
    assert np.mean(np.asarray(own_end) < 3 * typical) < 0.5  # what "end - latest start" would say


def test_traces_off_the_program_fall_back_with_a_note() -> None:
    job = generate(_spec())
    ops = job.trace.ops
    cols = {k: v.copy() for k, v in ops.columns().items()}
    fwd = cols["optype"] == OPTYPE_CODE["forward-compute"]
    cols["mc"][fwd & (cols["stage"] == 1)] = 0  # chunk ids that contradict the interleaved order
    t = build_template(Trace(ops=OpTable.from_columns(cols), meta=job.trace.meta))
    assert not t.rendezvous_groups
    assert [n for n in t.notes if "does not follow Megatron's interleaved" in n]


def test_meta_carries_vpp_and_layers_per_chunk(tmp_path: Path) -> None:
    job = generate(_spec(pp=2, vpp=3, microbatches=4, scenarios=["stage-imbalance"]))
    assert job.trace.meta.layers_per_chunk is not None and len(job.trace.meta.layers_per_chunk[0]) == 3
    write_parquet(job.trace, tmp_path / "trace.parquet")
    write_meta_yaml(job.trace.meta, tmp_path / "meta.yaml")
    back = load_trace([tmp_path / "trace.parquet", tmp_path / "meta.yaml"])
    assert back.meta.vpp == 3
    assert back.meta.layers_per_chunk == job.trace.meta.layers_per_chunk
    assert not [n for n in back.notes if "layers per model chunk unknown" in n]
    native = write_native(job.trace, tmp_path / "trace.jsonl")
    assert load_trace([native]).meta.layers_per_chunk == job.trace.meta.layers_per_chunk

    # without the layers per chunk (and without vpp_size) the reader says what it assumed
    meta = yaml.safe_load((tmp_path / "meta.yaml").read_text())
    del meta["layers_per_chunk"], meta["vpp_size"]
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    back = load_trace([tmp_path / "trace.parquet", tmp_path / "meta.yaml"])
    assert back.meta.vpp == 3
    assert [n for n in back.notes if "vpp_size not given: 3 model chunks" in n]
    assert [n for n in back.notes if "split evenly over its 3 chunks" in n]


def _oracle_transfers(
    t: Template, start: np.ndarray, end: np.ndarray, orig: np.ndarray, clamp: float
) -> None:
    """The witness rule of ``interleaved.rendezvous_transfers`` written plainly, pair by pair."""
    groups, which, calls = t.groups, t.rendezvous_groups, t.rendezvous_calls
    call_of = {v: c for c, nodes in enumerate(calls) for v in nodes}
    eff = {g: start[groups[g]].max(axis=0) for g in which}
    g_calls = {}
    for g in which:
        cs = sorted({call_of[v] for v in groups[g] if v in call_of})
        if len(groups[g]) >= 2 and len(cs) == 2:
            g_calls[g] = cs
    end_c = [end[nodes[0]] for nodes in calls]
    bound = {g: np.minimum(end_c[a], end_c[b]) - eff[g] for g, (a, b) in g_calls.items()}
    witnessed = {g: np.full(bound[g].shape, -np.inf) for g in g_calls}
    by_call: dict[int, list[int]] = {}
    for g, cs in g_calls.items():
        for c in cs:
            by_call.setdefault(c, []).append(g)
    for c, gs in by_call.items():
        other = [g_calls[g][1] if g_calls[g][0] == c else g_calls[g][0] for g in gs]
        cand = np.stack([end_c[o] >= end_c[c] - interleaved.WITNESS_TOL for o in other])
        effs = np.stack([eff[g] for g in gs])
        pick = np.argmax(np.where(cand, effs, -np.inf), axis=0)
        pick = np.where(cand.any(axis=0), pick, np.argmax(effs, axis=0))
        implied = end_c[c] - np.take_along_axis(effs, pick[None], axis=0)[0]
        for i, g in enumerate(gs):
            witnessed[g] = np.where(pick == i, np.maximum(witnessed[g], implied), witnessed[g])
    typical = float(np.median(np.concatenate([b.ravel() for b in bound.values()])))
    for g in which:
        members = groups[g]
        if g in g_calls:
            tr = np.where(np.isfinite(witnessed[g]), witnessed[g], np.minimum(bound[g], typical))
        else:
            tr = end[members].min(axis=0) - eff[g]
        tr = np.array(tr, dtype=np.float64)
        tr[tr <= -clamp] = 0.0
        orig[members] = tr[None]


@pytest.mark.parametrize("scenario", ["none", "slow-communication", "stage-imbalance", "gc-pause"])
def test_vectorised_pair_transfers_match_the_plain_rule(scenario: str) -> None:
    job = generate(_spec(pp=4, vpp=3, dp=4, steps=3, scenarios=[scenario], seed=21))
    eng = build_engine(job.trace)
    t = eng.template
    start = eng.start_dense
    end = start + t.dense(job.trace.ops.duration)
    want = eng.orig_dense.copy()
    _oracle_transfers(t, start, end, want, 1e-2)
    np.testing.assert_array_equal(eng.orig_dense, want)
