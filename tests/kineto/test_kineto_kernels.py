"""Kernel-level model: synthetic DDP/FSDP traces with known truth, the DLRM set, and a real gloo
recording with its span names taken out."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from diagnosers.diagnose import diagnose
from diagnosers.model import NameClass, classify_name
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.readers import kineto_kernels as kk
from diagnosers.readers.kineto import parse_file
from diagnosers.synth.kineto_kernels import KernelJobSpec, generate
from diagnosers.whatif import analyze

DATA = Path(__file__).resolve().parents[1] / "data"
DLRM = DATA / "kineto_public" / "param-dlrm-8rank"
GLOO_DP8 = DATA / "kineto_heldout" / "slow-rank-dp8" / "traces"


def _diagnosed(path: Path) -> tuple[float, float, str | None, list[int]]:
    trace = load_trace([path])
    report = analyze(trace)
    dg = diagnose(trace, report)
    top = dg.causes[0] if dg.causes else None
    return (report.slowdown, report.simulation_error, top.id.value if top else None,
            list(top.location.ranks) if top else [])


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
@pytest.mark.parametrize("era", ["old", "new"])
@pytest.mark.parametrize("scenario", ["slow-rank", "gc-pause", "dataloader-stall", "none"])
def test_synthetic_kernel_job_diagnosed_with_cause_and_rank(
    tmp_path: Path, mode: str, era: str, scenario: str
) -> None:
    labels = generate(KernelJobSpec(mode=mode, era=era, scenario=scenario, victim=3, seed=7), tmp_path)
    trace = load_trace([tmp_path])
    assert any("job model: kernel-level" in n for n in trace.notes)
    s, err, cause, ranks = _diagnosed(tmp_path)
    if scenario == "none":
        assert cause is None and s < 1.03
    else:
        assert cause == labels["cause"] and ranks == labels["ranks"]
    if scenario != "dataloader-stall":
        assert abs(err) <= 0.05  # the stall is unexplained by design: it is what the detector reads


def test_collectives_overlap_backward_not_a_serial_chain(tmp_path: Path) -> None:
    generate(KernelJobSpec(mode="ddp", layers=6, bucket_layers=2), tmp_path)
    trace = load_trace([tmp_path])
    g = trace.graph
    assert g is not None and sum(g.collective) == 3
    # every bucket's all-reduce waits for the segment before it, and the next segment does not
    # wait for the all-reduce: only the optimizer consumes them
    from diagnosers.model import OPTYPES

    names = [OPTYPES[o] for o, _ in g.nodes]
    for v, is_coll in enumerate(g.collective):
        if is_coll and v + 1 < len(g.nodes) and names[v + 1] == "backward-compute":
            assert v not in g.deps[v + 1]
    opt = names.index("optimizer")
    assert {v for v, c in enumerate(g.collective) if c} <= set(g.deps[opt])


def test_phase_model_still_available(tmp_path: Path) -> None:
    generate(KernelJobSpec(), tmp_path)
    trace = load_trace([tmp_path], ReadOptions(extra={"kineto_model": "phases"}))
    assert trace.graph is None and any("plain data-parallel" in n for n in trace.notes)


def test_dlrm_kernel_level_names_the_unexplained_part() -> None:
    trace = load_trace([DLRM])
    report = analyze(trace)
    notes = " ".join(report.notes)
    assert "job model: kernel-level" in notes and "SendRecv x5" in notes and "AllReduce x3" in notes
    assert "unexplained part of step 10" in notes
    # the phase model explained a small part of the step (error ~1160%); this one most of it
    assert report.simulation_error < 1.0


def _strip_span_names(src: Path, dst: Path) -> None:
    """The recording with every Megatron-named span renamed, as a plain PyTorch job would record."""
    dst.mkdir(parents=True)
    for p in sorted(src.glob("*.json.gz")):
        d = json.loads(gzip.decompress(p.read_bytes()))
        for e in d["traceEvents"]:
            named = classify_name(str(e.get("name"))) is not NameClass.UNKNOWN
            if e.get("cat") == "user_annotation" and named:
                e["name"] = "step-part:" + e["name"]
        (dst / p.name).write_bytes(gzip.compress(json.dumps(d).encode(), 1))


def test_real_gloo_dp_recording_without_span_names(tmp_path: Path) -> None:
    _strip_span_names(GLOO_DP8, tmp_path / "t")
    _s, err, cause, ranks = _diagnosed(tmp_path / "t")
    assert cause == "faulty-machine" and ranks == [5]  # rank 5 sleeps in every forward
    assert abs(err) <= 0.05


PLAIN = DATA / "kineto_plain"


def test_real_ddp_recording_gc_pause_found_without_span_names() -> None:
    truth = json.loads((PLAIN / "ddp-gc-2rank" / "injections.json").read_text())
    trace = load_trace([PLAIN / "ddp-gc-2rank" / "traces"])
    assert any("enqueue c10d::allreduce_ x3" in n and "gloo:all_reduce x3" in n for n in trace.notes)
    report = analyze(trace)
    dg = diagnose(trace, report)
    top = dg.causes[0]
    assert top.id.value == "gc-pause" and list(top.location.ranks) == [truth["gc_rank"]]
    assert abs(report.simulation_error) <= 0.05


def test_real_ddp_recording_dataloader_stall_found_without_span_names() -> None:
    truth = json.loads((PLAIN / "ddp-stall-2rank" / "injections.json").read_text())
    trace = load_trace([PLAIN / "ddp-stall-2rank" / "traces"])
    dg = diagnose(trace, analyze(trace))
    top = dg.causes[0]
    assert top.id.value == "dataloader-stall" and list(top.location.ranks) == [truth["stall_rank"]]


def _cells(folder: Path) -> list[tuple[int, int, list[kk.Item]]]:
    """Every (rank, step index, items) of a folder's traces, as the kernel-level reader sees them."""
    out = []
    for i, p in enumerate(sorted(folder.glob("rank*.pt.trace.json.gz"))):
        f = parse_file(p, i)
        rs = kk.gpu_rank_steps(f)
        assert rs is not None
        out.extend((rs.rank, s, items) for s, items in enumerate(rs.steps))
    return out


@pytest.mark.parametrize("era", ["new", "old"])
def test_collectives_matched_by_group_and_sequence_number_not_position(tmp_path: Path, era: str) -> None:
    # two process groups on their own streams; odd ranks launch group 1's all-reduce first
    generate(KernelJobSpec(mode="ddp", era=era, second_group=True, seed=5), tmp_path)
    cells = _cells(tmp_path)
    by_position = [[it.group for it in items if it.coll] for _, _, items in cells]
    assert any(g != by_position[0] for g in by_position)  # position alone would pair other groups
    aligned, how = kk._align_collectives(cells)
    groups = [[it.group for it in items if it.coll] for _, _, items in aligned]
    expected = {"pg 0", "pg 1"} if era == "new" else {"stream 20", "stream 21"}  # stream: no PG recorded
    assert all(g == groups[0] for g in groups) and set(groups[0]) == expected
    if era == "new":
        assert how.startswith("by (process group, sequence number)")
        # one collective per slot and step: every rank's member carries the same Seq
        for slot in range(len(groups[0])):
            for step in {s for _, s, _ in aligned}:
                seqs = {[it for it in items if it.coll][slot].seq for _, s, items in aligned if s == step}
                assert len(seqs) == 1 and None not in seqs
    else:
        assert how.startswith("by per-group order")
    assert "8 of 16 rank-steps launched them in another order" in how


@pytest.mark.parametrize("era", ["new", "old"])
def test_fsdp_with_a_second_group_launched_out_of_order_diagnosed(tmp_path: Path, era: str) -> None:
    labels = generate(KernelJobSpec(mode="fsdp", era=era, scenario="slow-rank", victim=1,
                                    second_group=True, seed=9), tmp_path)
    trace = load_trace([tmp_path])
    assert trace.graph is not None  # the kernel-level model, not the phase fallback
    _s, err, cause, ranks = _diagnosed(tmp_path)
    assert cause == labels["cause"] and ranks == labels["ranks"] and abs(err) <= 0.05


def test_a_collective_missing_on_one_rank_is_named_by_its_sequence_number(tmp_path: Path) -> None:
    generate(KernelJobSpec(mode="ddp", era="new", seed=2), tmp_path)
    p = tmp_path / "rank2.pt.trace.json.gz"
    d = json.loads(gzip.decompress(p.read_bytes()))
    rpc = [e for e in d["traceEvents"] if e.get("name") == "record_param_comms"]
    rpc[4]["args"]["Seq"] = 999  # rank 2 ran another collective than its peers in that step
    p.write_bytes(gzip.compress(json.dumps(d).encode()))
    trace = load_trace([tmp_path])
    note = next(n for n in trace.notes if "kernel-level model not used" in n)
    assert "collective pg 0 Seq" in note and "rank 2" in note and trace.graph is None


def test_gloo_recording_collectives_matched_by_order() -> None:
    # torch 2.13 on gloo records neither process group nor Seq on its collectives
    trace = load_trace([PLAIN / "ddp-slow-2rank" / "traces"])
    assert any("matched across ranks by per-group order" in n for n in trace.notes)


HTA_PG = Path("/work/shared/data/kineto/hta/ddp-pg-config/nccl_data.json.gz")


@pytest.mark.skipif(not HTA_PG.exists(), reason="the shared public Kineto set is not on this machine")
def test_real_nccl_trace_collectives_grouped_by_their_process_group_name() -> None:
    # a 2024 NCCL trace: kernels carry "Process Group Name" but no Seq; grouped by that name
    rs = kk.gpu_rank_steps(parse_file(HTA_PG, 0))
    assert rs is not None
    colls = [it for items in rs.steps for it in items if it.coll]
    assert colls and {it.group for it in colls} == {"pg 0"} and all(it.seq is None for it in colls)


def test_real_ddp_recording_slow_rank_found_without_span_names() -> None:
    truth = json.loads((PLAIN / "ddp-slow-2rank" / "injections.json").read_text())
    trace = load_trace([PLAIN / "ddp-slow-2rank" / "traces"])
    top = diagnose(trace, analyze(trace)).causes[0]
    assert top.id.value == "faulty-machine" and list(top.location.ranks) == [truth["slow_rank"]]


def test_fsdp2_wait_for_the_unshard_is_not_the_waiting_ranks_compute() -> None:
    # rank 1 sleeps 30 ms inside every forward; rank 0 blocks in work.wait() for the next layer's
    # all-gather meanwhile. gloo's own ops inside the collective (on its worker thread) must not
    # open rank 0's next segment, or that wait would be counted as rank 0's compute
    from diagnosers.model import OPTYPES

    trace = load_trace([PLAIN / "fsdp-slow-2rank" / "traces"])
    ops = trace.ops
    fwd = np.array([OPTYPES[o] == "forward-compute" for o in ops.optype])
    longest = {r: [float(ops.duration[fwd & (ops.rank == r) & (ops.step == s)].max())
                   for s in sorted(set(ops.step.tolist()))] for r in (0, 1)}
    assert all(d >= 0.025 for d in longest[1])
    assert sum(d < 0.020 for d in longest[0]) >= len(longest[0]) - 1


def test_real_fsdp2_recording_gc_pause_found_without_span_names() -> None:
    truth = json.loads((PLAIN / "fsdp-gc-2rank" / "injections.json").read_text())
    trace = load_trace([PLAIN / "fsdp-gc-2rank" / "traces"])
    assert any("enqueue c10d::_allgather_base_ x12" in n for n in trace.notes)
    report = analyze(trace)
    top = diagnose(trace, report).causes[0]
    assert top.id.value == "gc-pause" and list(top.location.ranks) == [truth["gc_rank"]]
    assert abs(report.simulation_error) <= 0.05


@pytest.mark.parametrize("odd", [None, '{"correlation": "7"}', '{"External id": true}', "[1, 2]", '"x"'])
def test_key_columns_match_a_per_event_oracle(odd: str | None) -> None:
    import msgspec

    from diagnosers.readers.kineto import LazyArgs, key_columns

    raws = ['{"correlation": 5, "External id": 9}', '{"correlation": 1.5}', "null", "{}",
            '{"External id": 12345678901, "x": {"correlation": 3}}', '{"correlation": -2}']
    if odd is not None:
        raws.insert(2, odd)

    def oracle(key: str) -> list[float]:
        out = []
        for r in raws:
            v = json.loads(r)
            x = v.get(key) if isinstance(v, dict) else None
            out.append(float(x) if type(x) in (int, float) else float("nan"))
        return out

    corr, ext = key_columns(LazyArgs([msgspec.Raw(r.encode()) for r in raws]))
    assert np.array_equal(corr, oracle("correlation"), equal_nan=True)
    assert np.array_equal(ext, oracle("External id"), equal_nan=True)


def test_fsdp2_recording_forward_waits_for_each_unshard_all_gather() -> None:
    # FSDP2 on CPU unshards each layer before its forward (work.wait() on the all-gather): the
    # segment after each forward all-gather consumes it; nothing else of the structure is assumed
    from diagnosers.model import OPTYPES

    g = load_trace([PLAIN / "fsdp-slow-2rank" / "traces"]).graph
    assert g is not None
    names = [OPTYPES[o] for o, _ in g.nodes]
    gathers = [v for v, c in enumerate(g.collective)
               if c and names[v] == "params-all-gather" and "gloo:all_gather" in g.pool[v]]
    assert len(gathers) == 6
    for v in gathers:
        nxt = next(u for u in range(v + 1, len(names)) if not g.collective[u])
        assert v in g.deps[nxt]
