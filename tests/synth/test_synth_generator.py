"""The generator's own invariants: schema, op multisets, determinism, timing causality, labels."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from diagnosers.model import OPTYPE_CODE, OPTYPES, OpTable, Trace
from diagnosers.readers import load_trace
from diagnosers.synth import (
    DEFAULT_MAGNITUDE,
    GeneratedJob,
    Scenario,
    ScenarioSpec,
    Schedule,
    demo_job,
    generate,
)
from diagnosers.synth.corpus import corpus_specs
from diagnosers.synth.schedule import interleaved_order
from diagnosers.writers import write_meta_yaml, write_native, write_parquet

ARTIFACT = Path("/work/shared/data/straggler-artifact")
ST = ARTIFACT / "trace-ST.parquet"


def _names(ops: OpTable) -> np.ndarray:
    return ops.optype_names()


def _worker(ops: OpTable, dp: int, stage: int, step: int) -> OpTable:
    m = (ops.dp_rank == dp) & (ops.stage == stage) & (ops.step == step)
    sub = ops.take(np.nonzero(m)[0])
    order = np.lexsort((sub.optype, sub.seq_id, sub.start_ts))
    return sub.take(order)


def _multiset(ops: OpTable, dp: int, stage: int, step: int) -> Counter[str]:
    return Counter(_names(_worker(ops, dp, stage, step)).tolist())


@pytest.fixture(scope="module")
def st_like() -> GeneratedJob:
    return generate(ScenarioSpec(dp=2, pp=4, microbatches=4, steps=3, seed=3))


# -- schema ---------------------------------------------------------------------------------------
@pytest.mark.skipif(not ST.exists(), reason="artifact sample not present")
def test_parquet_schema_matches_artifact(st_like: GeneratedJob, tmp_path: Path) -> None:
    path = write_parquet(st_like.trace, tmp_path / "t.parquet")
    ours = pq.read_schema(path)
    theirs = pq.read_schema(ST)
    assert ours.names == theirs.names
    assert [f.type for f in ours] == [f.type for f in theirs]


@pytest.mark.skipif(not ST.exists(), reason="artifact sample not present")
def test_minus_one_conventions_and_multisets_match_artifact(st_like: GeneratedJob) -> None:
    t = pq.read_table(ST)
    cols = {c: np.asarray(t.column(c).to_pylist()) for c in t.column_names}
    theirs = set(zip(cols["optype"], cols["mc"] == -1, cols["mb_id"] == -1, cols["gmc"] == -1, strict=True))
    ops = st_like.trace.ops
    ours = set(zip(_names(ops), ops.mc == -1, ops.mb_id == -1, ops.gmc == -1, strict=True))
    assert ours == theirs
    # ST is dp 2 x pp 4 x 4 microbatches, 1F1B: the same per-stage op multisets.
    s0 = int(cols["step"].min())
    for stage in range(4):
        m = (cols["dp_rank"] == 0) & (cols["stage"] == stage) & (cols["step"] == s0)
        assert _multiset(ops, 0, stage, 0) == Counter(cols["optype"][m].tolist()), stage


def test_widening_only_when_values_overflow(tmp_path: Path) -> None:
    job = generate(ScenarioSpec(dp=130, pp=2, microbatches=130, steps=1))
    schema = pq.read_schema(write_parquet(job.trace, tmp_path / "w.parquet"))
    types = {f.name: str(f.type) for f in schema}
    assert types["dp_rank"] == "int16" and types["mb_id"] == "int16"
    assert types["stage"] == "int8" and types["mc"] == "int8" and types["rank"] == "int16"


@pytest.mark.parametrize(
    "spec",
    [
        ScenarioSpec(dp=3, pp=4, microbatches=6, steps=3),
        ScenarioSpec(dp=2, pp=4, microbatches=8, steps=2, schedule=Schedule.GPIPE),
        ScenarioSpec(dp=2, pp=4, vpp=2, microbatches=8, steps=2, schedule=Schedule.INTERLEAVED),
        ScenarioSpec(dp=2, pp=3, vpp=3, microbatches=6, steps=2, schedule=Schedule.INTERLEAVED),
        ScenarioSpec(dp=2, pp=4, vpp=2, microbatches=4, steps=2, schedule=Schedule.INTERLEAVED),
        ScenarioSpec(dp=1, pp=1, microbatches=3, steps=2),
        ScenarioSpec(dp=2, pp=8, microbatches=3, steps=2),
        ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, scenarios=[Scenario.SEQUENCE_LENGTH_IMBALANCE,
                                                                    Scenario.GC_PAUSE]),
    ],
    ids=["1f1b", "gpipe", "interleaved-2", "interleaved-3", "interleaved-allwarmup", "pp1", "m<pp", "mixed"],
)
def test_multisets_consistent_and_timing_causal(spec: ScenarioSpec) -> None:
    job = generate(spec)
    ops = job.trace.ops
    steps = spec.step_ids()
    for stage in range(spec.pp):
        ref = _multiset(ops, 0, stage, steps[0])
        for dp in range(spec.dp):
            for step in steps:
                assert _multiset(ops, dp, stage, step) == ref, (dp, stage, step)
        n_f = ref["forward-compute"]
        assert n_f == spec.microbatches * spec.vpp and ref["backward-compute"] == n_f
        if spec.schedule is Schedule.INTERLEAVED:
            # one record per compute and direction, no-ops included (what the method's matching wants)
            for name in ("forward-send", "forward-recv", "backward-send", "backward-recv"):
                assert ref[name] == n_f, (stage, name)
    assert (ops.duration >= 0).all()
    assert np.isclose(ops.duration[ops.optype == OPTYPE_CODE["gc"]], 0).all()
    for step in steps:
        assert abs(ops.start_ts[ops.step == step].min()) < 1e-12  # relative to the step start
    comp = np.isin(ops.optype, [OPTYPE_CODE["forward-compute"], OPTYPE_CODE["backward-compute"]])
    for dp in range(spec.dp):
        for stage in range(spec.pp):
            w = _worker(ops, dp, stage, steps[-1])
            # one worker runs its calls in order: no two distinct calls overlap
            starts, ends = np.unique(np.stack([w.start_ts, w.end_ts], axis=1), axis=0).T
            assert (starts[1:] >= ends[:-1] - 1e-9).all()
            # seq_id counts each op type in start order
            for code in np.unique(w.optype):
                assert (w.seq_id[w.optype == code] == np.arange((w.optype == code).sum())).all()
            c = comp[(ops.dp_rank == dp) & (ops.stage == stage) & (ops.step == steps[-1])]
            assert c.sum() == 2 * spec.microbatches * spec.vpp


def test_p2p_pairs_end_together_after_both_posts(st_like: GeneratedJob) -> None:
    ops, spec = st_like.trace.ops, st_like.spec
    for dp in range(spec.dp):
        for s in range(spec.pp - 1):
            a, b = _worker(ops, dp, s, 1), _worker(ops, dp, s + 1, 1)
            for send, recv in (("forward-send", "forward-recv"), ("backward-recv", "backward-send")):
                ma, mb = _names(a) == send, _names(b) == recv
                ea, eb = a.end_ts[ma], b.end_ts[mb]
                assert len(ea) == len(eb) == spec.microbatches
                # a pair completes after both sides posted (batched calls may end later still, with
                # their slowest op); timestamps carry per-host clock skew of a few tens of µs
                latest_post = np.maximum(a.start_ts[ma], b.start_ts[mb])
                assert (np.minimum(ea, eb) > latest_post - 2e-4).all()


def test_dp_collective_waits_for_the_slowest_member() -> None:
    job = generate(ScenarioSpec(dp=4, pp=2, microbatches=4, steps=2, scenarios=[Scenario.FAULTY_MACHINE],
                                worker=(3, 1), magnitude=3.0))
    ops = job.trace.ops
    rs = (ops.optype == OPTYPE_CODE["grads-reduce-scatter"]) & (ops.stage == 1) & (ops.step == 1)
    ends = ops.end_ts[rs]
    assert ends.max() - ends.min() < 2e-4  # everyone leaves together
    waits = ops.duration[rs]
    assert waits[ops.dp_rank[rs] == 3] < waits[ops.dp_rank[rs] != 3].min()  # the slow one waits least


def test_deterministic_by_seed() -> None:
    spec = ScenarioSpec(dp=4, pp=2, microbatches=4, steps=3, scenarios=[Scenario.GC_PAUSE], seed=11)
    a, b = generate(spec), generate(spec)
    for name, col in a.trace.ops.columns().items():
        assert np.array_equal(col, getattr(b.trace.ops, name)), name
    assert a.labels == b.labels
    c = generate(spec.model_copy(update={"seed": 12}))
    assert not np.array_equal(a.trace.ops.duration, c.trace.ops.duration)


# -- labels -----------------------------------------------------------------------------------------
def test_labels_json_shape_and_megatron_ranks() -> None:
    spec = ScenarioSpec(dp=4, pp=2, tp=2, cp=2, microbatches=4, steps=3,
                        scenarios=[Scenario.FAULTY_MACHINE], worker=(1, 1))
    job = generate(spec)
    dumped = job.labels.model_dump(mode="json")
    assert set(dumped) == {"causes", "expected_straggling"}
    (cause,) = dumped["causes"]
    assert set(cause) == {"id", "magnitude", "location", "true_marginal"}
    assert cause["true_marginal"] == pytest.approx(job.true_slowdown, rel=1e-5)  # one cause: the same
    assert set(cause["location"]) == {"dp_ranks", "pp_ranks", "ranks", "hosts", "steps"}
    # rank = tp*cp*(dp + dp_size*pp): TP fastest, then CP, DP, PP slowest
    assert cause["location"] == {"dp_ranks": [1], "pp_ranks": [1], "ranks": [20], "hosts": [2],
                                 "steps": [0, 1, 2]}
    ops = job.trace.ops
    assert set(ops.rank[(ops.dp_rank == 1) & (ops.stage == 1)].tolist()) == {20}
    assert cause["magnitude"] == DEFAULT_MAGNITUDE[Scenario.FAULTY_MACHINE]
    assert dumped["expected_straggling"] is True


def test_healthy_job_has_no_causes_and_is_not_straggling() -> None:
    job = generate(ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, seed=5))
    assert job.labels.causes == [] and job.labels.expected_straggling is False


def test_faulty_host_lists_every_traced_gpu_of_the_host() -> None:
    spec = ScenarioSpec(dp=8, pp=4, microbatches=4, steps=2, scenarios=[Scenario.FAULTY_MACHINE], host=2,
                        magnitude=1.5)
    job = generate(spec)
    loc = job.labels.causes[0].location
    assert loc.hosts == [2] and loc.ranks == list(range(16, 24))
    assert loc.pp_ranks == [2] and loc.dp_ranks == list(range(8))
    ops = job.trace.ops
    fwd = ops.optype == OPTYPE_CODE["forward-compute"]
    slow = fwd & (ops.stage == 2)
    ref = fwd & (ops.stage == 1)
    assert ops.duration[slow].mean() / ops.duration[ref].mean() == pytest.approx(1.5, rel=0.05)
    with pytest.raises(ValueError, match="does not exist"):
        ScenarioSpec(dp=2, pp=2, scenarios=[Scenario.FAULTY_MACHINE], host=5)


def test_stall_is_idle_time_not_longer_ops() -> None:
    base = ScenarioSpec(dp=2, pp=4, microbatches=4, steps=3, seed=2)
    healthy, stalled = generate(base), generate(base.model_copy(update={
        "scenarios": [Scenario.DATALOADER_STALL], "magnitude": 0.4}))
    fwd = OPTYPE_CODE["forward-compute"]
    for job in (healthy, stalled):
        assert job.trace.ops.duration.dtype == np.float64
    h, s = healthy.trace.ops, stalled.trace.ops
    assert s.duration[s.optype == fwd].mean() == pytest.approx(h.duration[h.optype == fwd].mean(), rel=0.02)
    for dp in range(2):
        w = _worker(s, dp, 0, 1)
        names = _names(w)
        ag_end = w.end_ts[names == "params-all-gather"][0]
        first_f = w.start_ts[names == "forward-compute"][0]
        assert 0.3 < first_f - ag_end < 0.5
    assert stalled.labels.expected_straggling is False
    assert stalled.labels.causes[0].location.pp_ranks == [0]


def test_sequence_length_correlates_fwd_bwd_and_moves_the_slow_dp_rank() -> None:
    job = generate(ScenarioSpec(dp=16, pp=2, microbatches=8, steps=5,
                                scenarios=[Scenario.SEQUENCE_LENGTH_IMBALANCE], seed=4))
    ops = job.trace.ops
    for stage in range(2):
        f = (ops.optype == OPTYPE_CODE["forward-compute"]) & (ops.stage == stage)
        b = (ops.optype == OPTYPE_CODE["backward-compute"]) & (ops.stage == stage)
        kf = np.lexsort((ops.mb_id[f], ops.dp_rank[f], ops.step[f]))
        kb = np.lexsort((ops.mb_id[b], ops.dp_rank[b], ops.step[b]))
        assert np.corrcoef(ops.duration[f][kf], ops.duration[b][kb])[0, 1] > 0.9
    f0 = (ops.optype == OPTYPE_CODE["forward-compute"]) & (ops.stage == 0)
    per = np.zeros((5, 16))
    np.add.at(per, (ops.step[f0], ops.dp_rank[f0]), ops.duration[f0])
    assert len(set(per.argmax(axis=1).tolist())) >= 3  # the slowest DP rank moves between steps
    loc = job.labels.causes[0].location
    assert loc.dp_ranks == list(range(16)) and loc.steps == list(range(5))


def test_gc_pause_sits_in_a_forward_of_a_labelled_worker_and_step() -> None:
    job = generate(ScenarioSpec(dp=4, pp=2, microbatches=4, steps=6, scenarios=[Scenario.GC_PAUSE],
                                gc_growing=True, seed=9))
    ops = job.trace.ops
    loc = job.labels.causes[0].location
    long = (ops.optype == OPTYPE_CODE["forward-compute"]) & (ops.duration > 0.1)
    assert long.any()
    assert set(ops.step[long].tolist()) == set(loc.steps)
    assert set(ops.dp_rank[long].tolist()) == set(loc.dp_ranks)
    assert set(ops.rank[long].tolist()) == set(loc.ranks)
    assert not ((ops.optype == OPTYPE_CODE["backward-compute"]) & (ops.duration > 0.2)).any()
    assert job.labels.causes[0].signature().pattern.temporal == "growing"


def test_slow_link_slows_only_that_links_transfers() -> None:
    spec = ScenarioSpec(dp=4, pp=4, microbatches=8, steps=2, scenarios=[Scenario.SLOW_COMMUNICATION],
                        magnitude=20.0, seed=1)
    job = generate(spec)
    loc = job.labels.causes[0].location
    assert len(loc.dp_ranks) == 1 and len(loc.pp_ranks) == 2 and loc.pp_ranks[1] == loc.pp_ranks[0] + 1
    healthy = generate(spec.model_copy(update={"scenarios": [Scenario.NONE]}))
    comp = OPTYPE_CODE["forward-compute"]
    a, h = job.trace.ops, healthy.trace.ops
    assert a.duration[a.optype == comp].mean() == pytest.approx(h.duration[h.optype == comp].mean(), rel=0.01)
    # the fastest forward-send on the slow link is far slower than anywhere else's fastest
    d, s = loc.dp_ranks[0], loc.pp_ranks[0]
    w = _worker(a, d, s, 0)
    other = _worker(a, (d + 1) % 4, s, 0)
    fs = "forward-send"
    assert w.duration[_names(w) == fs].min() > 5 * other.duration[_names(other) == fs].min()


# -- writers, readers, CLI --------------------------------------------------------------------------
def test_roundtrip_through_the_readers(st_like: GeneratedJob, tmp_path: Path) -> None:
    trace: Trace = st_like.trace
    pq_path = write_parquet(trace, tmp_path / "trace.parquet")
    meta_path = write_meta_yaml(trace.meta, tmp_path / "meta.yaml")
    native = write_native(trace, tmp_path / "trace.jsonl")
    for paths in ([pq_path, meta_path], [native]):
        back = load_trace(paths)
        assert back.meta.dp == 2 and back.meta.pp == 4 and back.meta.layers_per_stage == [7, 8, 8, 7]
        a, b = trace.ops, back.ops
        ka = np.lexsort((a.seq_id, a.optype, a.stage, a.dp_rank, a.step))
        kb = np.lexsort((b.seq_id, b.optype, b.stage, b.dp_rank, b.step))
        for col in ("dp_rank", "stage", "rank", "step", "optype", "seq_id", "mc", "gmc", "mb_id"):
            assert np.array_equal(getattr(a, col)[ka], getattr(b, col)[kb]), col
        assert np.allclose(a.start_ts[ka], b.start_ts[kb], atol=1e-6)
        assert np.allclose(a.duration[ka], b.duration[kb], atol=1e-6)
    first = json.loads(native.read_text().split("\n", 1)[0])
    assert first["job"]["gpus_per_host"] == 8 and first["job"]["dp_size"] == 2


def test_cli_writes_the_three_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from server.cli import main

    out = tmp_path / "job"
    rc = main(["generate", "--dp", "2", "--pp", "2", "--microbatches", "4", "--steps", "2",
               "--scenario", "faulty-machine,gc-pause", "--magnitude", "2", "--seed", "3",
               "--format", "native", "-o", str(out)])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert {p.name for p in out.iterdir()} == {"trace.parquet", "meta.yaml", "labels.json", "trace.jsonl"}
    labels = json.loads((out / "labels.json").read_text())
    assert [c["id"] for c in labels["causes"]] == ["faulty-machine", "gc-pause"]
    assert summary["labels"] == labels and summary["ops"] > 0
    rc = main(["generate", "--scenario", "nope", "-o", str(out)])
    assert rc == 2
    assert "scenarios" in capsys.readouterr().err
    rc = main(["generate", "--schedule", "interleaved", "--vpp", "2", "--pp", "4", "--microbatches", "6",
               "-o", str(out)])
    assert rc == 2
    assert "divisible by pp" in capsys.readouterr().err


def test_interleaved_order_is_megatrons() -> None:
    # pp=2, vpp=2: forwards go mb0c0 mb1c0 mb0c1 mb1c1 mb2c0 ...; backwards start on the last chunk
    fwd = [interleaved_order(k, 2, 2, 4, True) for k in range(8)]
    assert fwd[:5] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0)]
    assert interleaved_order(0, 2, 2, 4, False) == (0, 1)


def test_corpus_and_demo_generate() -> None:
    names = [n for n, _ in corpus_specs()]
    assert len(names) == len(set(names)) >= 12
    covered = {sc for _, spec in corpus_specs() for sc in spec.scenarios}
    assert covered == set(Scenario)
    job = demo_job()
    assert job.labels.causes[0].id == "stage-imbalance" and len(job.trace.ops) > 0
    assert set(_names(job.trace.ops)) <= set(OPTYPES)


def test_a_host_without_traced_ranks_is_a_clear_error() -> None:
    # tp 16 > 8 GPUs per host: traced ranks 0, 16, 32, 48 sit on hosts 0, 2, 4, 6
    spec = ScenarioSpec(dp=2, pp=2, tp=16, microbatches=2, steps=1, scenarios=[Scenario.FAULTY_MACHINE],
                        host=1)
    with pytest.raises(ValueError, match="host 1 holds no traced rank"):
        generate(spec)
    job = generate(spec.model_copy(update={"host": 2}))
    assert job.labels.causes[0].location.ranks == [16] and job.labels.causes[0].location.hosts == [2]
