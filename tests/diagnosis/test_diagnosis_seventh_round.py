"""Seventh round on real recordings (docs/ACCURACY.md, "Seventh round"): the microbatch coherence
of the sequence-length test takes out the position pattern every DP rank shares
(``sequence_length.microbatch_coherence``), and an onset may be read from compute and the
worker's per-step fast ops together (``faulty_machine.fast_op_steps``, ``_fast_op_onset``). The
per-step fast ops are checked against a plain loop, and each rule is pinned on the seen
recordings that needed it (``heldout7``'s misses of its one run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from diagnosers import whatif
from diagnosers.detectors import compute_stats, faulty_machine
from diagnosers.detectors.base import TraceStats
from diagnosers.detectors.peers import change_point, noise_correlation
from diagnosers.detectors.sequence_length import COHERENCE, microbatch_coherence
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.diagnose import diagnose
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.synth import CostModel, ScenarioSpec, generate
from diagnosers.vocab import CauseId, Temporal

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import recordings  # noqa: E402

from tests._support.recorded import WIDENED, widened_folder  # noqa: E402

SEEN = ("tune", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7")


def _stats(folder: Path) -> TraceStats:
    inj = json.loads((folder / "injections.json").read_text())
    lps = inj.get("layers_per_stage")
    trace = load_trace([folder / "traces"], ReadOptions(layers_per_stage=list(lps)) if lps else None)
    return compute_stats(trace, whatif.build_engine(trace))


# --- helpers against plain loops and small series ------------------------------------------------


def test_fast_op_steps_match_a_plain_loop() -> None:
    st = _stats(widened_folder("heldout7", "onset-3x2"))
    got = faulty_machine.fast_op_steps(st)
    assert got.shape == (st.n_steps, st.dp, st.pp)
    for s in range(st.n_steps):
        for d in range(st.dp):
            for p in range(st.pp):
                logs = []
                for code in (FWD, BWD):
                    vals = sorted(
                        float(st.transfer[i]) for i in range(st.n_ops)
                        if st.optype[i] == code and st.op_step_index[i] == s
                        and st.op_dp[i] == d and st.op_pp[i] == p
                    )
                    pick = int(np.floor(faulty_machine.FAST_OP_QUANTILE * (len(vals) - 1)))
                    logs.append(np.log(vals[pick]))
                assert got[s, d, p] == pytest.approx(float(np.exp(np.mean(logs))), rel=1e-12)


# --- the shared position pattern is no sequence length ------------------------------------------


@pytest.mark.parametrize("name", ["healthy-4x2", "send-delay-3x2"])
def test_a_position_pattern_every_replica_shares_is_not_coherence(name: str) -> None:
    c, _ = microbatch_coherence(_stats(widened_folder("heldout7", name)))
    assert c < COHERENCE, f"{name}: coherence {c:.3f}"


def test_every_seen_variable_length_recording_stays_coherent() -> None:
    found = 0
    for part in SEEN:
        for f in sorted((WIDENED / part).iterdir()):
            inj = f / "injections.json"
            if not inj.is_file() or not json.loads(inj.read_text())["var_seq"]:
                continue
            c, _ = microbatch_coherence(_stats(f))
            assert c >= COHERENCE, f"{part}/{f.name}: coherence {c:.3f}"
            found += 1
    assert found == 10


def test_the_slow_sender_is_no_sequence_length_imbalance() -> None:
    d = recordings.diagnose_folder(widened_folder("heldout7", "send-delay-3x2"))
    assert [(c.id, c.location.ranks) for c in d.causes] == [(CauseId.SLOW_COMMUNICATION, [1, 4])]


# --- an onset read from compute and the fast ops ---------------------------------------------------


def test_an_onset_with_one_step_at_the_peers_pace_is_found() -> None:
    folder = widened_folder("heldout7", "onset-3x2")  # 20 ms on rank 1 from step 4; step 6 at its peers' pace
    st = _stats(folder)
    cell = (1, 0)
    floor = faulty_machine.job_floor(st, [cell])
    timing = faulty_machine.cell_timing(st, cell, floor)
    # neither compute alone (24% step noise) nor compute with its optimizer shows the onset
    cp = change_point(timing.r, floor.step, min_after=2, min_before=2)
    assert cp is None  # step 6 at its peers' pace: no clean change point in compute
    assert faulty_machine._joint_onset(st, cell, floor, [], timing.r, float(np.median(timing.r))) is None
    assert timing.onset is not None and int(st.steps[timing.onset.index]) == 4
    d = recordings.diagnose_folder(folder)
    top = d.causes[0]
    assert top.id == CauseId.FAULTY_MACHINE and top.location.ranks == [1]
    assert top.pattern.temporal == Temporal.ONSET and top.evidence["onset_step"] == 4


def test_fast_ops_that_move_with_the_step_sums_are_no_second_look() -> None:
    # the generator's step noise scales every op of a worker-step alike: its fastest ops are the
    # step sums again (a false onset on this healthy job before the cut-off)
    job = generate(ScenarioSpec(dp=4, pp=2, steps=5, seed=26), CostModel(step_sigma=0.2, op_sigma=0.03))
    st = compute_stats(job.trace, whatif.build_engine(job.trace))
    rho_generated = noise_correlation(st.compute, faulty_machine.fast_op_steps(st), [])
    assert rho_generated > faulty_machine.FAST_OP_MAX_RHO
    assert not diagnose(job.trace).causes
    # a busy host's descheduling is sporadic: a second look, correlated in part
    real = _stats(widened_folder("heldout7", "onset-3x2"))
    rho = noise_correlation(real.compute, faulty_machine.fast_op_steps(real), [(1, 0)])
    assert 0.5 < rho <= faulty_machine.FAST_OP_MAX_RHO
