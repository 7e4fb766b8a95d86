"""Host noise on kernel-level jobs: one-step compute bursts told apart from a slow rank, DDP's
bucket copies as consumers of their all-reduce, and the GC pause test against the job's own tail,
on the real gloo recordings (tuning and seen parts only; the third held-out part is never read
here)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from diagnosers.detectors import compute_stats
from diagnosers.detectors.gc_pause import TAIL_GAP, above_tail, paused_forwards, recurring
from diagnosers.diagnose import diagnose
from diagnosers.model import OPTYPE_CODE
from diagnosers.readers import load_trace
from diagnosers.readers.kineto_kernels import DDP_COPY
from diagnosers.transport_noise import BURST_REL, COMPUTE_CODES, detection_view, host_bursts
from diagnosers.whatif import analyze, build_engine
from tests._support.recorded import top_cause, truth

DATA = Path(__file__).resolve().parents[1] / "data"
BWD = OPTYPE_CODE["backward-compute"]


def test_a_one_step_burst_is_capped_at_the_ranks_own_typical_and_a_slow_rank_kept() -> None:
    folder = DATA / "kineto_plain" / "fsdp-slow-2rank"
    trace = load_trace([folder / "traces"])
    eng = build_engine(trace)
    t = eng.template
    slow = int(truth(folder)["slow_rank"])  # type: ignore[arg-type]
    other = 1 - slow
    comp = np.flatnonzero(np.isin(t.optype, COMPUTE_CODES))
    bwd = int(comp[t.optype[comp] == BWD][-2])
    dense = eng.orig_dense.copy()
    dense[bwd, other, 3] += 0.5  # other work on the host takes the healthy rank's CPU for 500 ms
    noisy = replace(eng, orig_dense=dense, _nodelay=None, _rows={})
    noisy.actual_step_times = eng.actual_step_times + (noisy.nodelay_step_times - eng.nodelay_step_times)
    before = noisy.orig_dense.copy()
    found = host_bursts(trace, noisy, float(noisy.nodelay_step_times.mean()), noisy.ideal_step_time)
    assert found is not None
    bursts, clean = found
    np.testing.assert_array_equal(noisy.orig_dense, before)  # the engine passed in is left alone
    assert [(d, s) for d, s, _, _ in bursts.cells] == [(other, int(eng.steps[3]))]
    assert bursts.cells[0][2] >= BURST_REL * np.median(before[comp][:, other].sum(axis=0))
    # oracle: in the burst cell each compute segment at its own median over the steps on that rank
    med = np.median(before[comp][:, other, :], axis=1)
    np.testing.assert_allclose(clean.orig_dense[comp, other, 3], np.minimum(before[comp, other, 3], med))
    # every other cell as measured: the slow rank's slowness is its median, not a burst
    keep = np.ones(before.shape, dtype=bool)
    keep[comp, other, 3] = False
    np.testing.assert_array_equal(clean.orig_dense[keep], before[keep])
    assert bursts.share > 0.1
    # judged on the view, the slow rank is the one found
    dg = diagnose(trace, analyze(trace, engine=noisy), engine=noisy)
    assert dg.causes and dg.causes[0].id.value == "faulty-machine"
    assert list(dg.causes[0].location.ranks) == [slow]
    assert any(n.startswith("host noise:") for n in dg.notes) and "Host noise" in dg.summary


def test_no_burst_without_a_step_far_above_the_ranks_own() -> None:
    trace = load_trace([DATA / "kineto_plain" / "fsdp-healthy-2rank" / "traces"])
    eng = build_engine(trace)
    comp = np.flatnonzero(np.isin(eng.template.optype, COMPUTE_CODES))
    dense = eng.orig_dense.copy()
    # every compute segment within 20% of its median over the steps: step noise, no burst
    med = np.median(dense[comp], axis=2, keepdims=True)
    dense[comp] = np.clip(dense[comp], 0.8 * med, 1.2 * med)
    calm = replace(eng, orig_dense=dense, _nodelay=None, _rows={})
    assert host_bursts(trace, calm, float(calm.nodelay_step_times.mean()), calm.ideal_step_time) is None
    assert host_bursts(trace, replace(eng, steps=eng.steps[:2]), 1.0, 0.5) is None


def test_a_gc_pause_in_a_burst_cell_is_kept() -> None:
    trace = load_trace([DATA / "kineto_plain" / "fsdp-gc-2rank" / "traces"])
    eng = build_engine(trace)
    stats = compute_stats(trace, eng)
    rows = stats.fwd_index[paused_forwards(stats)]
    assert len(rows) == 2
    view = detection_view(trace, eng, analyze(trace, engine=eng))
    assert view is not None
    # the paused forwards keep their length in the view the detectors judge
    np.testing.assert_allclose(view.stats.transfer[rows], stats.transfer[rows])


@pytest.mark.parametrize(
    ("part", "job"),
    [("kineto_plain_heldout2", "fsdp-slow-2rank"), ("kineto_plain_heldout", "fsdp-slow-2rank"),
     ("kineto_plain_heldout", "ddp-slow-2rank"), ("kineto_plain_tune2", "ddp-slow-4rank")],
)
def test_slow_ranks_beside_host_noise_are_found(part: str, job: str) -> None:
    folder = DATA / part / job
    assert top_cause(folder) == ("faulty-machine", [truth(folder)["slow_rank"]])


def test_ddp_bucket_copies_consume_their_all_reduce() -> None:
    trace = load_trace([DATA / "kineto_plain_tune2" / "ddp-slow-4rank" / "traces"])
    g = trace.graph
    assert g is not None
    copies = [i for i, p in enumerate(g.pool) if DDP_COPY in p]
    colls = [i for i, (c, p) in enumerate(zip(g.collective, g.pool, strict=True))
             if c and p.startswith("gloo:all_reduce")]
    assert len(copies) == len(colls) == 3  # three buckets
    # each bucket's copy waits for that bucket's all-reduce, in the reducer's order
    for k, c in zip(copies, colls, strict=True):
        assert c in g.deps[k]
    # so the waiting ranks' backward compute no longer holds the slow rank's lag
    stats = compute_stats(trace, build_engine(trace))
    slow = int(truth(DATA / "kineto_plain_tune2" / "ddp-slow-4rank")["slow_rank"])  # type: ignore[arg-type]
    per_rank = np.median(stats.compute[:, :, 0], axis=0)
    assert int(np.argmax(per_rank)) == slow


def test_gc_pauses_must_stand_above_the_jobs_own_tail() -> None:
    folder = DATA / "kineto_plain_heldout2" / "fsdp-gc-2rank"
    trace = load_trace([folder / "traces"])
    stats = compute_stats(trace, build_engine(trace))
    paused = paused_forwards(stats)
    kept = above_tail(stats, paused)
    # two ordinary forwards of 5-7 ms pass the z test on this host; the two collections do not
    # stand near them
    assert int(paused.sum()) == 4 and int(kept.sum()) == 2
    tail = float(stats.fwd_excess[~paused].max())
    assert (stats.fwd_excess[kept] >= TAIL_GAP * tail).all()
    assert (stats.fwd_excess[paused & ~kept] < TAIL_GAP * tail).all()
    assert top_cause(folder) == ("gc-pause", [truth(folder)["gc_rank"]])


def test_a_sleep_in_one_layer_every_step_is_not_a_gc_pause() -> None:
    folder = DATA / "kineto_plain" / "fsdp-slow-2rank"
    trace = load_trace([folder / "traces"])
    stats = compute_stats(trace, build_engine(trace))
    assert recurring(stats, paused_forwards(stats))
    gc = DATA / "kineto_plain" / "fsdp-gc-2rank"
    gc_stats = compute_stats(load_trace([gc / "traces"]), None)
    assert not recurring(gc_stats, paused_forwards(gc_stats))
    assert top_cause(folder) == ("faulty-machine", [truth(folder)["slow_rank"]])
