"""Rules for real recordings on a busy host (docs/ACCURACY.md, "Widened data", second round): an
onset read from compute and optimizer together, microbatch coherence for sequence lengths, and a
slow link that stands out under batched P2P — each pinned on the tuning recording that needed it
(every one of these failed before the rule) and the helpers against plain oracles."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from diagnosers import whatif
from diagnosers.detectors import compute_stats
from diagnosers.detectors.base import TraceStats
from diagnosers.detectors.peers import joint_series, level_shift
from diagnosers.detectors.sequence_length import COHERENCE, microbatch_coherence
from diagnosers.detectors.slow_communication import candidates, stands_out
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.vocab import CauseId, Temporal

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import recordings  # noqa: E402

from tests._support.recorded import widened_folder  # noqa: E402


def _stats(folder: Path) -> TraceStats:
    inj = json.loads((folder / "injections.json").read_text())
    lps = inj.get("layers_per_stage")
    trace = load_trace([folder / "traces"], ReadOptions(layers_per_stage=list(lps)) if lps else None)
    return compute_stats(trace, whatif.build_engine(trace))


# --- helpers against oracles -------------------------------------------------------------------


def test_joint_series_is_clipped_stouffer() -> None:
    a, b = np.array([0.1, 0.9, -0.2]), np.array([1.0, -1.0, 30.0])
    got = joint_series([a, b], [0.1, 0.5])
    want = [
        (np.clip(x / 0.1, -3, 3) + np.clip(y / 0.5, -3, 3)) / np.sqrt(2) for x, y in zip(a, b, strict=True)
    ]
    assert np.allclose(got, want)


def test_level_shift_wants_a_healthy_start_not_only_a_jump() -> None:
    onset = np.array([0.3, -0.2, 3.0, 3.5, 2.8, 3.2])
    cp = level_shift(onset, 2, 2, z_jump=2.5, z_before=2.0, z_after=4.0)
    assert cp is not None and cp.index == 2
    # Persistently slow with two faster first steps: a clean jump, but never at the healthy level.
    persistent = np.array([2.5, 2.6, 4.0, 4.2, 3.9, 4.1])
    assert level_shift(persistent, 2, 2, z_jump=2.5, z_before=2.0, z_after=4.0) is None
    # Noise: no significant level after any split.
    noise = np.array([0.5, -0.4, 0.9, 1.1, 0.6, 1.0])
    assert level_shift(noise, 2, 2, z_jump=2.5, z_before=2.0, z_after=4.0) is None


def _coherence_oracle(st: TraceStats) -> float:
    """Mean pairwise Spearman correlation of (step, dp, microbatch) rows over (stage, chunk, pass)
    columns, each duration over its worker-step/chunk/pass median, then over the DP ranks' median
    at its (step, stage, chunk, pass, microbatch) position: plain loops and dicts."""
    assert st.op_mb is not None
    rows: dict[tuple[int, int, int], dict[tuple[int, int, int], float]] = {}
    groups: dict[tuple[int, ...], list[float]] = {}

    def key(i: int) -> tuple[int, ...]:
        return tuple(int(a[i]) for a in (st.op_step_index, st.op_dp, st.op_pp, st.op_gmc, st.optype))

    ops = [i for i in range(st.n_ops) if st.optype[i] in (FWD, BWD) and st.op_mb[i] >= 0]
    for i in ops:
        groups.setdefault(key(i), []).append(float(np.log(st.transfer[i])))
    centred = {i: float(np.log(st.transfer[i])) - float(np.median(groups[key(i)])) for i in ops}
    # then the shared position effect: the median over the DP ranks of the same (step, stage,
    # chunk, pass, microbatch)
    def position(i: int) -> tuple[int, ...]:
        return tuple(int(a[i]) for a in (st.op_step_index, st.op_pp, st.op_gmc, st.optype, st.op_mb))

    across: dict[tuple[int, ...], list[float]] = {}
    for i in ops:
        across.setdefault(position(i), []).append(centred[i])
    for i in ops:
        v = centred[i] - float(np.median(across[position(i)]))
        row = (int(st.op_step_index[i]), int(st.op_dp[i]), int(st.op_mb[i]))
        rows.setdefault(row, {})[(int(st.op_pp[i]), int(st.op_gmc[i]), int(st.optype[i]))] = v
    cols = sorted({c for r in rows.values() for c in r})
    table = np.array([[r[c] for c in cols] for r in rows.values() if len(r) == len(cols)])
    ranks = np.argsort(np.argsort(table, axis=0), axis=0).astype(float)
    n = len(cols)
    pairs = [float(np.corrcoef(ranks[:, a], ranks[:, b])[0, 1]) for a in range(n) for b in range(a + 1, n)]
    return float(np.mean(pairs))


def test_microbatch_coherence_matches_a_plain_loop() -> None:
    st = _stats(widened_folder("heldout", "var-seq-2x3"))
    got, z = microbatch_coherence(st)
    assert got == pytest.approx(_coherence_oracle(st), abs=1e-9)
    assert z > 4.0


@pytest.mark.parametrize(
    ("part", "name", "coherent"),
    [
        ("tune", "var-seq-2x2", True),
        ("heldout", "var-seq-2x3", True),
        ("tune", "var-seq-4x2", True),
        ("tune", "healthy-2x2", False),
        ("heldout", "healthy-4x2", False),
        ("heldout", "gc-pause-4x2", False),
        ("tune", "slow-rank-2x2", False),
    ],
)
def test_microbatch_coherence_separates_variable_lengths_from_noise(
    part: str, name: str, coherent: bool
) -> None:
    c, _ = microbatch_coherence(_stats(widened_folder(part, name)))
    assert (c >= COHERENCE) is coherent, f"{name}: coherence {c:.3f}"


def test_the_slow_link_stands_out_and_its_noisy_neighbour_does_not() -> None:
    st = _stats(widened_folder("heldout", "send-delay-4x2"))  # rank 3 (dp 3, stage 0) sends slowly
    assert st.probe is not None
    scored = candidates(st, st.probe.original)
    out = stands_out(st, st.probe.original, scored)
    hits = {name for (name, _, _), hit in zip(scored, out, strict=True) if hit}
    assert "pp link dp 3: stage 0 <-> 1" in hits
    assert "pp link dp 1: stage 0 <-> 1" not in hits  # its waits are compute noise


# --- the recordings that needed the rules --------------------------------------------------------


def test_throttling_from_step_4_under_heavy_noise_is_an_onset() -> None:
    d = recordings.diagnose_folder(widened_folder("heldout", "onset-4x2"))
    top = d.causes[0]
    assert top.id == CauseId.FAULTY_MACHINE and top.location.ranks == [5]
    assert top.pattern.temporal == Temporal.ONSET
    assert top.evidence["onset_step"] == 4 and top.evidence["affected_steps"] == [4, 5, 6, 7]


@pytest.mark.parametrize(("part", "name"), [("tune", "var-seq-2x2"), ("heldout", "var-seq-2x3")])
def test_variable_lengths_drowned_in_noise_are_found(part: str, name: str) -> None:
    d = recordings.diagnose_folder(widened_folder(part, name))
    assert d.causes and d.causes[0].id == CauseId.SEQUENCE_LENGTH_IMBALANCE, [c.id for c in d.causes]
    assert float(d.causes[0].evidence["microbatch_coherence"] or 0.0) >= COHERENCE  # type: ignore[arg-type]


def test_slow_sends_at_dp4_beside_compute_noise_are_the_link() -> None:
    d = recordings.diagnose_folder(widened_folder("heldout", "send-delay-4x2"))
    top = d.causes[0]
    assert top.id == CauseId.SLOW_COMMUNICATION and top.location.ranks == [3, 7]
    assert top.evidence["stands_out"] is True
