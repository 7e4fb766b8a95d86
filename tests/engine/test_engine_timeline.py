"""Timelines: critical paths against networkx, the time breakdown against a direct sweep, and the
Chrome trace-event export against the Trace Event Format (a JSON Schema plus slice and flow rules;
Perfetto's trace processor cannot run offline)."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import jsonschema
import networkx as nx
import numpy as np
import pytest
from dag_oracle import oracle_graph, random_graph

from diagnosers.graph import template_from_graph
from diagnosers.model import OPTYPE_KIND, OPTYPES, OpKind, TraceError
from diagnosers.readers import load_trace
from diagnosers.simulate import simulate
from diagnosers.timeline import (
    COMPUTE,
    GAP,
    TRANSFER,
    WAIT,
    RunTimes,
    analyze_timeline,
    choose_steps,
    chrome_trace,
    export_size_bound,
    group_starts,
    path_cells,
    recorded_run,
    time_breakdown,
)
from diagnosers.whatif import WhatIfEngine, build_engine

ST = Path(__file__).resolve().parents[2] / "diagnosers" / "samples" / "artifact" / "trace-ST.parquet"


@pytest.fixture(scope="module")
def st_engine() -> WhatIfEngine:
    return build_engine(load_trace([str(ST)]))


# ----------------------------------------------------------------------------------------------
# critical path vs networkx


def nx_longest(deps, groups, dp_sync, dur: np.ndarray, launch: np.ndarray) -> tuple[float, list[Any]]:
    """networkx's longest path over start/end/join vertices per (node, DP rank)."""
    graph = oracle_graph(deps, groups, dp_sync, dur, launch)
    path = nx.dag_longest_path(graph, weight="w")
    return float(nx.dag_longest_path_length(graph, weight="w")), path


@pytest.mark.parametrize("seed", range(12))
def test_critical_path_is_networkx_longest_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    deps, groups, sync = random_graph(rng, int(rng.integers(4, 14)))
    dp = int(rng.integers(1, 4))
    t = template_from_graph(deps, groups, sync, dp=dp)
    n = t.n_nodes
    dur = rng.uniform(0.1, 1.0, size=(n, dp))
    launch = np.where(rng.random((n, dp)) < 0.3, rng.uniform(0.0, 0.5, size=(n, dp)), 0.0)
    res = simulate(t, dur[:, None, :, None], (1, dp, 1), launch=launch[:, None, :, None], keep=True)
    assert res.start is not None and res.end is not None
    start, end = res.start[:, 0, :, 0], res.end[:, 0, :, 0]
    cells = path_cells(t, start, end, launch)
    length, nx_path = nx_longest(deps, groups, sync, dur, launch)

    # the length: the step time, networkx's longest path, and the sum of the tiled segments
    assert cells[-1][4] == pytest.approx(res.step_times[0, 0], abs=1e-12)
    assert cells[-1][4] == pytest.approx(length, abs=1e-9)
    assert sum(hi - lo for *_, lo, hi in cells) == pytest.approx(length, abs=1e-9)
    assert cells[0][3] == 0.0
    for a, b in pairwise(cells):
        assert a[4] == b[3]  # contiguous
    # the same chain: ops whose end is on the path, and the group members the walk entered by
    ours_end = [(v, d) for v, d, kind, *_ in cells if kind in ("compute", "communication")]
    nx_end = [(x[1], x[2]) for x in nx_path if isinstance(x, tuple) and x[0] == "E"]
    assert ours_end == nx_end
    ours_entry = {(v, d) for v, d, kind, *_ in cells if kind == "group-entry"}
    nx_entry = {
        (a[1], a[2])
        for a, b in pairwise(nx_path)
        if isinstance(a, tuple) and a[0] == "S" and isinstance(b, tuple) and b[0] == "J"
    }
    assert ours_entry <= nx_entry
    assert {c for c in nx_entry if c not in ours_entry} <= set(ours_end)


def test_critical_path_lengths_are_the_simulated_step_times(st_engine: WhatIfEngine) -> None:
    eng = st_engine
    a = analyze_timeline(eng)
    replay = eng.launch_step_times()
    assert len(a.critical_paths) == 2 * len(eng.steps)
    for cp in a.critical_paths:
        i = eng.steps.index(cp.step)
        want = replay[i] if cp.run == "actual" else eng.ideal_step_time
        assert cp.length == pytest.approx(want, rel=1e-12)
        assert sum(s.time for s in cp.segments) == pytest.approx(cp.length, rel=1e-9)
        assert sum(s.share for s in cp.segments) == pytest.approx(1.0, rel=1e-9)
        assert all(s.time >= 0 for s in cp.segments)
        if cp.run == "actual":  # the replay reproduces the recording of ST
            assert cp.length == pytest.approx(eng.actual_step_times[i], rel=1e-6)
            # long launch gaps are walked through the worker's own ops (program order)
            assert cp.share_by_kind.get("launch-gap", 0.0) < 0.05
        # the path crosses ranks: it visits every stage of the pipeline
        assert {s.pp_rank for s in cp.segments} == set(range(eng.template.pp))
    assert a.worst_step == eng.steps[int(np.argmax(eng.actual_step_times))]


# ----------------------------------------------------------------------------------------------
# where the time goes


def direct_breakdown(eng: WhatIfEngine, run: RunTimes, d: int, s: int, i: int) -> np.ndarray:
    """One worker and step, by checking every elementary interval's midpoint against every op."""
    t = eng.template
    nodes = np.flatnonzero(t.stage == s)
    st, en, gs = (
        np.broadcast_to(a, run.start.shape)[nodes, d, i] for a in (run.start, run.end, run.group_start)
    )
    comp = np.array([OPTYPE_KIND[OPTYPES[int(o)]] is OpKind.COMPUTE for o in t.optype[nodes]])
    gs = np.clip(gs, st, en)
    bounds = np.unique(np.concatenate([[0.0], st, en, gs]))
    out = np.zeros(4)
    for lo, hi in pairwise(bounds):
        m = (lo + hi) / 2
        run_ = (st < m) & (m < en)
        if (run_ & comp).any():
            out[COMPUTE] += hi - lo
        elif (run_ & ~comp & (gs < m)).any():
            out[TRANSFER] += hi - lo
        elif (run_ & ~comp & (m < gs)).any():
            out[WAIT] += hi - lo
        else:
            out[GAP] += hi - lo
    return out


def test_breakdown_sums_to_each_workers_step_time(st_engine: WhatIfEngine) -> None:
    eng = st_engine
    t = eng.template
    a = analyze_timeline(eng)
    end = eng.start_dense + t.dense(eng.trace.ops.duration)
    assert len(a.breakdown) == t.dp * t.pp * len(eng.steps)
    for w in a.breakdown:
        i = eng.steps.index(w.step)
        worker_end = float(end[t.stage == w.pp_rank, w.dp_rank, i].max())
        parts = w.compute + w.exposed_comm + w.waiting_on_peers + w.launch_gaps
        assert parts == pytest.approx(worker_end, rel=1e-9)
        assert w.step_time == pytest.approx(worker_end, rel=1e-9)
        assert w.bubble + w.straggler_wait == pytest.approx(w.waiting_on_peers, rel=1e-12)
        assert min(w.compute, w.exposed_comm, w.waiting_on_peers, w.launch_gaps, w.bubble) >= 0
        assert w.straggler_wait >= 0
    for row in a.straggler_free_breakdown:
        assert row.compute + row.exposed_comm + row.waiting_on_peers == pytest.approx(
            eng.ideal_step_time, rel=1e-9
        )


def test_breakdown_matches_a_direct_sweep(st_engine: WhatIfEngine) -> None:
    eng = st_engine
    run = recorded_run(eng)
    fast = time_breakdown(eng.template, run)
    for d, s, i in [(0, 0, 0), (1, 3, 5), (0, 2, len(eng.steps) - 1)]:
        np.testing.assert_allclose(fast[:, s, d, i], direct_breakdown(eng, run, d, s, i), atol=1e-9)


def test_group_start_is_the_last_members_start() -> None:
    # two members on one DP rank each; the DP-synchronised group waits for both ranks
    t = template_from_graph([[], [], []], [[0, 1], [2]], [False, True], dp=2)
    start = np.array([[1.0, 2.0], [3.0, 0.5], [4.0, 7.0]])[:, :, None]
    gs = group_starts(t, start)
    np.testing.assert_array_equal(gs[:, :, 0], [[3.0, 2.0], [3.0, 2.0], [7.0, 7.0]])


# ----------------------------------------------------------------------------------------------
# the Chrome trace-event export

EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["ph", "pid"],
    "properties": {
        "ph": {"enum": ["X", "B", "E", "i", "I", "s", "t", "f", "M", "C", "b", "e", "n"]},
        "name": {"type": "string"},
        "cat": {"type": "string"},
        "pid": {"type": ["integer", "string"]},
        "tid": {"type": ["integer", "string"]},
        "ts": {"type": "number", "minimum": 0},
        "dur": {"type": "number", "minimum": 0},
        "id": {"type": ["integer", "string"]},
        "bp": {"const": "e"},
        "args": {"type": "object"},
    },
    "allOf": [
        {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["name", "ts", "dur", "tid"]}},
        {
            "if": {"properties": {"ph": {"enum": ["s", "t", "f"]}}},
            "then": {"required": ["id", "ts", "tid", "name"]},
        },
        {
            "if": {"properties": {"ph": {"const": "M"}}},
            "then": {
                "required": ["name", "args"],
                "properties": {
                    "name": {
                        "enum": [
                            "process_name",
                            "thread_name",
                            "process_sort_index",
                            "thread_sort_index",
                            "process_labels",
                        ]
                    }
                },
            },
        },
    ],
}
TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": EVENT_SCHEMA},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
    },
}


def check_trace(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema plus the importer's cross-event rules: every flow has a start and a finish, each
    bound to an enclosing slice on its own thread; slices on one thread nest or do not overlap."""
    jsonschema.validate(doc, TRACE_SCHEMA)
    ev = doc["traceEvents"]
    slices: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    flows: dict[tuple[Any, Any], dict[str, Any]] = defaultdict(dict)
    for e in ev:
        if e["ph"] in ("s", "f"):
            if e["ph"] in flows[(e.get("cat"), e["id"])]:
                raise ValueError(f"flow {e['id']} has two {e['ph']} events")
            flows[(e.get("cat"), e["id"])][e["ph"]] = e
            if not any(a <= e["ts"] <= b for a, b in slices[(e["pid"], e["tid"])]):
                raise ValueError(f"flow {e['id']} {e['ph']} at ts={e['ts']} has no enclosing slice")
    for key, ends in flows.items():
        if set(ends) != {"s", "f"}:
            raise ValueError(f"flow {key} lacks start or finish")
    for key, spans in slices.items():
        stack: list[float] = []
        for a, b in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= a:
                stack.pop()
            if stack and b > stack[-1]:
                raise ValueError(f"slices on {key} overlap without nesting at ts={a}")
            stack.append(b)
    named = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    if not set(slices) <= threads:
        raise ValueError("a slice sits on a thread without a name")
    return {
        "slices": sum(map(len, slices.values())),
        "flows": len(flows),
        "named_pids": len(named),
        "flow_map": flows,
    }


def graph_flows(eng: WhatIfEngine) -> tuple[int, int]:
    """(P2P pairs, other collective member links) of one step, from the template graph: a P2P pair
    is one link per DP rank; a collective of m members links m - 1 of them to the one it waited for,
    per DP rank, or across every DP rank when DP-synchronised."""
    t = eng.template
    p2p = coll = 0
    for g, members in enumerate(t.groups):
        cells = len(members) * (t.dp if t.group_dp_sync[g] else 1)
        links = (cells - 1) * (1 if t.group_dp_sync[g] else t.dp)
        if all(OPTYPE_KIND[OPTYPES[int(t.optype[m])]] is OpKind.PP_COMM for m in members):
            p2p += links
        else:
            coll += links
    return p2p, coll


def test_chrome_export_on_st(st_engine: WhatIfEngine, tmp_path: Path) -> None:
    eng = st_engine
    t = eng.template
    doc = chrome_trace(eng)
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(doc, allow_nan=False))
    doc = json.loads(path.read_text())
    got = check_trace(doc)

    worst, typical = choose_steps(eng)
    assert worst != typical
    chosen = [worst, typical]
    assert [s["step"] for s in doc["otherData"]["steps"]] == chosen
    n_ops = int(np.isin(eng.trace.ops.step, chosen).sum())
    assert got["slices"] == 2 * n_ops
    p2p, coll = graph_flows(eng)
    assert p2p > 0 and coll > 0
    assert got["flows"] == len(chosen) * (p2p + coll)
    assert len(doc["traceEvents"]) <= export_size_bound(eng, len(chosen))
    cats = [k[0] for k in got["flow_map"]]
    assert cats.count("p2p") == len(chosen) * p2p
    assert cats.count("collective") == len(chosen) * coll
    # flows sit on the simulated run's lanes (thread ids 20, 21, ...)
    assert {e["tid"] // 10 for e in doc["traceEvents"] if e["ph"] in ("s", "f")} == {2}

    # one process per worker, named with its coordinates, two threads each
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert got["named_pids"] == t.dp * t.pp
    assert "dp 1 · pp 3 · rank 7 · host 0" in names
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    for p in range(1, t.dp * t.pp + 1):
        assert threads[(p, 10)] == "actual" and threads[(p, 20)] == "straggler-free (simulated)"
    # compute overlaps communication on a worker: such ops spill onto extra lanes of their run
    assert any(tid % 10 for _, tid in threads)
    assert all(name.startswith(("actual", "straggler-free")) for name in threads.values())

    # critical-path ops are marked on both threads, with their shares
    a = analyze_timeline(eng, chosen)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    for run, run_no in (("actual", 1), ("straggler-free", 2)):
        for step in chosen:
            cp = next(c for c in a.critical_paths if c.run == run and c.step == step)
            want = {(s.op, s.dp_rank) for s in cp.segments if s.kind != "launch-gap"}
            marked = [
                e
                for e in xs
                if e["tid"] // 10 == run_no and e["args"]["step"] == step and e["args"]["critical"]
            ]
            assert {(e["args"]["op"], e["args"]["dp_rank"]) for e in marked} == want
            assert all("critical-path" in e["cat"].split(",") for e in marked)
            assert sum(e["args"]["critical_share"] for e in marked) == pytest.approx(
                1.0 - cp.share_by_kind.get("launch-gap", 0.0), rel=1e-9
            )
    # the actual thread holds the recorded durations
    dur = {
        (e["args"]["op"], e["args"]["dp_rank"], e["args"]["step"]): e["dur"]
        for e in xs
        if e["tid"] // 10 == 1
    }
    ops = eng.trace.ops
    row = int(np.flatnonzero(ops.step == worst)[0])
    key = (t.name(int(t.node_of_row[row])), int(ops.dp_rank[row]), worst)
    assert dur[key] == pytest.approx(ops.duration[row] * 1e6, abs=1)


def test_chrome_export_chosen_steps_and_errors(st_engine: WhatIfEngine) -> None:
    eng = st_engine
    doc = chrome_trace(eng, steps=[eng.steps[3]])
    got = check_trace(doc)
    assert got["slices"] == 2 * int((eng.trace.ops.step == eng.steps[3]).sum())
    with pytest.raises(TraceError, match=r"step 99999 is not in the trace") as exc:
        chrome_trace(eng, steps=[99999])
    assert exc.value.step == 99999
    with pytest.raises(TraceError, match="at most 16 steps"):
        chrome_trace(eng, steps=eng.steps[:17])


def test_the_checker_rejects_a_flow_outside_its_slice(st_engine: WhatIfEngine) -> None:
    doc = chrome_trace(st_engine, steps=[st_engine.steps[0]])
    f = next(e for e in doc["traceEvents"] if e["ph"] == "f")
    f["ts"] = 1e12
    with pytest.raises(ValueError, match="has no enclosing slice"):
        check_trace(doc)
    names = [e for e in doc["traceEvents"] if e["ph"] == "M"][:4]
    crossing = [
        {"ph": "X", "pid": 1, "tid": 10, "name": "a", "ts": 0, "dur": 10},
        {"ph": "X", "pid": 1, "tid": 10, "name": "b", "ts": 5, "dur": 10},
    ]
    with pytest.raises(ValueError, match="overlap without nesting"):
        check_trace({"traceEvents": names + crossing})
    del doc["traceEvents"][0]["pid"]
    with pytest.raises(jsonschema.ValidationError):
        check_trace(doc)


@pytest.mark.parametrize(
    "spec",
    [
        dict(dp=2, pp=4, microbatches=8, steps=3, seed=11, scenarios=["faulty-machine"]),
        dict(dp=2, pp=4, microbatches=8, steps=3, seed=12, schedule="gpipe"),
        dict(
            dp=2,
            pp=4,
            vpp=2,
            microbatches=8,
            steps=3,
            schedule="interleaved",
            seed=13,
            scenarios=["gc-pause"],
        ),
        dict(dp=4, pp=2, microbatches=4, steps=3, seed=14, scenarios=["dataloader-stall"]),
    ],
    ids=["1f1b-faulty", "gpipe", "interleaved-gc", "dataloader"],
)
def test_timelines_on_generated_jobs(spec: dict[str, Any]) -> None:
    from diagnosers.synth import ScenarioSpec, generate

    eng = build_engine(generate(ScenarioSpec(**spec)).trace)
    t = eng.template
    a = analyze_timeline(eng)
    replay = eng.launch_step_times()
    for cp in a.critical_paths:
        i = eng.steps.index(cp.step)
        want = replay[i] if cp.run == "actual" else eng.ideal_step_time
        assert cp.length == pytest.approx(want, rel=1e-9)
        assert sum(s.time for s in cp.segments) == pytest.approx(cp.length, rel=1e-9)
    end = eng.start_dense + t.dense(eng.trace.ops.duration)
    for w in a.breakdown:
        i = eng.steps.index(w.step)
        parts = w.compute + w.exposed_comm + w.waiting_on_peers + w.launch_gaps
        assert parts == pytest.approx(float(end[t.stage == w.pp_rank, w.dp_rank, i].max()), rel=1e-9)
    doc = json.loads(json.dumps(chrome_trace(eng), allow_nan=False))
    got = check_trace(doc)
    chosen = [s["step"] for s in doc["otherData"]["steps"]]
    assert got["slices"] == 2 * int(np.isin(eng.trace.ops.step, chosen).sum())
    assert got["flows"] == len(chosen) * sum(graph_flows(eng))


@pytest.mark.parametrize(
    ("scenario", "stalled"),
    [("dataloader-stall", True), ("gc-pause", False), ("faulty-machine", False), ("stage-imbalance", False)],
)
def test_launch_gaps_on_the_path_are_the_injected_input_stall(scenario: str, stalled: bool) -> None:
    """Ground truth from the generator: only a dataloader stall (CPU-side time before the first op
    of a step) shows up as launch gaps on the actual critical path."""
    from diagnosers.synth import ScenarioSpec, generate

    job = generate(ScenarioSpec(dp=2, pp=4, microbatches=8, steps=4, seed=21, scenarios=[scenario]))
    a = analyze_timeline(build_engine(job.trace))
    gaps = [c.share_by_kind.get("launch-gap", 0.0) for c in a.critical_paths if c.run == "actual"]
    if stalled:
        assert min(gaps) > 0.1, gaps
    else:
        assert max(gaps) < 0.02, gaps
