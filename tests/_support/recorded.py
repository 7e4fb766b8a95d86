"""Helpers for tests on the real recordings in ``tests/data``: a recording's folder (checked to
hold its ``injections.json``), its truth, the top cause the diagnosis names for it, and a plain
PyTorch part's score."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from diagnosers.detectors import compute_stats
from diagnosers.detectors.base import TraceStats
from diagnosers.diagnose import diagnose
from diagnosers.heatmap import worker_matrix
from diagnosers.model import Trace
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.report_view import ReportView
from diagnosers.transport_noise import detection_view
from diagnosers.vocab import CauseId
from diagnosers.whatif import analyze, build_engine, report_json

DATA = Path(__file__).resolve().parents[1] / "data"
WIDENED = DATA / "kineto_widened"


def widened_folder(part: str, name: str) -> Path:
    """The folder of the example job's recording ``name`` in part ``part`` of the widened data."""
    f = WIDENED / part / name
    assert (f / "injections.json").is_file(), f"missing recording {f}"
    return f


def widened_trace(folder: Path) -> Trace:
    """The recording's traces, read with its ``layers_per_stage`` when the recorder set one."""
    lps = truth(folder).get("layers_per_stage")
    opts = ReadOptions(layers_per_stage=[int(x) for x in lps]) if isinstance(lps, list) and lps else None
    return load_trace([folder / "traces"], opts)


def widened_causes(folder: Path) -> list[tuple[CauseId, list[int]]]:
    """The diagnosis of one widened recording: (cause id, its ranks) for each cause, in order."""
    return [(c.id, c.location.ranks) for c in diagnose(widened_trace(folder)).causes]


def widened_stats(folder: Path) -> TraceStats:
    """The detectors' statistics of the recording (``widened_trace``) with its what-if engine."""
    trace = widened_trace(folder)
    return compute_stats(trace, build_engine(trace))


def widened_hottest(folder: Path) -> tuple[ReportView, TraceStats, tuple[int, int]]:
    """The recording's report, detector statistics and its hottest worker in S_w as (dp, pp)."""
    trace = widened_trace(folder)
    eng = build_engine(trace)
    report = ReportView.of(report_json(trace, engine=eng), trace.meta)
    m = worker_matrix(report, "exact")
    p, d = (int(x) for x in np.unravel_index(int(np.argmax(m)), m.shape))
    return report, compute_stats(trace, eng), (d, p)


def widened_healthy(part: str) -> list[Path]:
    """The recordings of ``part`` with nothing injected: no slow rank, send delay, stall, varied
    lengths or GC victims, and an even partition."""
    out = []
    for f in sorted((WIDENED / part).iterdir()):
        if not (f / "injections.json").is_file():
            continue
        inj = truth(f)
        injected = any(inj.get(k) is not None for k in ("slow_rank", "send_delay_rank", "stall_rank"))
        injected = injected or bool(inj.get("var_seq")) or bool(inj.get("gc_victims"))
        layers = inj.get("layers_per_stage")
        even = not isinstance(layers, list) or len(set(layers or [1])) == 1
        if not injected and even:
            out.append(f)
    return out


def truth(folder: Path) -> dict[str, object]:
    """What the recorder injected (``injections.json``)."""
    return json.loads((folder / "injections.json").read_text())


def top_cause(folder: Path) -> tuple[str, list[int]]:
    """(cause id, ranks) of the diagnosis's top cause for the recording's traces; ("none", [])
    when it names none."""
    trace = load_trace([folder / "traces"])
    dg = diagnose(trace, analyze(trace))
    return (dg.causes[0].id.value, list(dg.causes[0].location.ranks)) if dg.causes else ("none", [])


# A plain PyTorch recording's injection (``injections.json``: -1 when not injected) and the cause it
# is diagnosed as, in the order the recorder's switches are checked.
PLAIN_CAUSE_OF = (
    ("slow_rank", "faulty-machine"),
    ("gc_rank", "gc-pause"),
    ("stall_rank", "dataloader-stall"),
)


def plain_truth(folder: Path) -> tuple[str, list[int]]:
    """(cause id, ranks) a plain PyTorch recording should be diagnosed with; ("none", []) when
    healthy."""
    inj = truth(folder)
    for key, cause in PLAIN_CAUSE_OF:
        if int(str(inj[key])) >= 0:
            return cause, [int(str(inj[key]))]
    return "none", []


def plain_part_score(part: str, size: int) -> tuple[set[str], dict[str, tuple[str, list[int]]]]:
    """(the recordings diagnosed right, the missed ones with their top cause as diagnosed) of the
    plain PyTorch part ``tests/data/<part>``, which must hold ``size`` recordings."""
    folders = sorted(p for p in (DATA / part).iterdir() if (p / "injections.json").exists())
    assert len(folders) == size, f"{part}: {len(folders)} recordings, expected {size}"
    got = {f.name: top_cause(f) for f in folders}
    right = {f.name for f in folders if got[f.name] == plain_truth(f)}
    return right, {n: got[n] for n in sorted(set(got) - right)}


def view_stats(folder: Path) -> TraceStats:
    """The statistics the detectors judge a kernel-level recording on: its detection view's when
    the view is material (``transport_noise.detection_view``), else the trace's own."""
    trace = load_trace([folder / "traces"])
    eng = build_engine(trace)
    view = detection_view(trace, eng, analyze(trace, engine=eng))
    return view.stats if view is not None else compute_stats(trace, eng)


def widened_part_score(part: str, size: int) -> tuple[dict[str, Any], dict[str, tuple[str, list[int]]],
                                                      dict[str, tuple[str, list[int]]]]:
    """(each recording's score by ``bench/recordings.py``'s ``score_folder``, each one's top cause
    and ranks as diagnosed, the missed ones' top cause) of the example job's recorded part
    ``tests/data/kineto_widened/<part>``, which must hold ``size`` recordings."""
    bench = str(Path(__file__).resolve().parents[2] / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import recordings

    folders = recordings.folders(part)
    assert len(folders) == size, f"{part}: {len(folders)} recordings, expected {size}"
    assert all(f.parent == WIDENED / part for f in folders)
    scored = {f.name: recordings.score_folder(f) for f in folders}
    got = {n: (s.got[0][0], list(s.got[0][2])) if s.got else ("none", []) for n, s in scored.items()}
    return scored, got, {n: got[n] for n, s in scored.items() if not s.right}


def assert_part_shape(scored: dict[str, Any], healthy: list[str], onsets: list[str],
                      partitions: dict[str, list[int]]) -> None:
    """The checks every balanced held-out part's pin shares, on ``widened_part_score``'s scores:
    its healthy recordings are ``healthy`` with no false faulty machine or GC, no recording is a
    silent miss, each of ``onsets`` is named a faulty machine with an onset first, and each of
    ``partitions`` a stage imbalance at those ranks first."""
    assert sorted(n for n, s in scored.items() if s.healthy) == sorted(healthy)
    assert not any(scored[n].false_machine_or_gc for n in healthy)
    assert not any(s.silent_miss for s in scored.values())
    for name in onsets:
        top = scored[name].got[0]
        assert (top[0], str(top[3])) == ("faulty-machine", "onset"), name
    for name, ranks in partitions.items():
        top = scored[name].got[0]
        assert (top[0], list(top[2])) == ("stage-imbalance", ranks), name
