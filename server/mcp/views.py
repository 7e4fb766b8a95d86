"""Bounded views of the analysis results for MCP tool outputs.

A tool result must stay usable by an assistant (well under 1 MiB, about 10k tokens). The views
keep the shapes of ``WhatIfReport`` and ``Diagnosis`` and cap their long parts: per-step tables
keep the worst ``MAX_STEPS`` steps by step slowdown (each with its ``MAX_STEP_KEYS`` largest
entries), per-worker lists the ``MAX_WORKERS`` slowest, rank dictionaries the ``MAX_KEYS`` largest
values. ``omitted`` counts what each cap held back and
``truncated`` says whether anything was; the full documents are on the REST routes.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from diagnosers.detectors.base import CauseMatch
from diagnosers.diagnose import Diagnosis
from diagnosers.heatmap import Heatmap
from diagnosers.remedies import Remedy
from diagnosers.report import Fidelity, ScenarioResult, WhatIfReport

MAX_STEPS = 8
MAX_STEP_KEYS = 16
MAX_WORKERS = 16
MAX_KEYS = 64
MAX_NOTES = 20
MAX_CAUSES = 10


class Trimmer:
    """Caps collections and remembers how many entries each cap dropped."""

    def __init__(self) -> None:
        self.omitted: dict[str, int] = {}

    def note(self, name: str, total: int, kept: int) -> None:
        if total > kept:
            self.omitted[name] = total - kept

    def top(self, name: str, d: dict[str, float], limit: int = MAX_KEYS) -> dict[str, float]:
        """The ``limit`` largest values, in the original key order."""
        if len(d) <= limit:
            return d
        keep = set(sorted(d, key=lambda k: d[k], reverse=True)[:limit])
        self.note(name, len(d), limit)
        return {k: v for k, v in d.items() if k in keep}

    def keys(self, name: str, d: dict[str, Any], keep: set[str]) -> dict[str, Any]:
        out = {k: v for k, v in d.items() if k in keep}
        self.note(name, len(d), len(out))
        return out

    def head(self, name: str, items: list[Any], limit: int) -> list[Any]:
        self.note(name, len(items), min(limit, len(items)))
        return items[:limit]


def trim_report(
    report: WhatIfReport,
    t: Trimmer,
    prefix: str = "",
    *,
    max_steps: int = MAX_STEPS,
    max_step_keys: int = MAX_STEP_KEYS,
    max_workers: int = MAX_WORKERS,
) -> WhatIfReport:
    """A copy of the report with its per-step, per-worker and per-rank parts capped.

    Per-step tables keep the ``max_steps`` worst steps, each with its ``max_step_keys`` largest
    entries; whole-job rank tables keep ``MAX_KEYS`` entries.
    """
    ranked = sorted(report.step_slowdown, key=lambda k: report.step_slowdown[k], reverse=True)
    worst = set(ranked[:max_steps])
    a = report.attribution
    p = prefix
    workers = sorted(
        a.by_worker,
        key=lambda w: w.slowdown if w.slowdown is not None else w.slowdown_estimate,
        reverse=True,
    )
    attribution = a.model_copy(
        update={
            "by_optype": a.by_optype,
            "by_dp_rank": t.top(f"{p}attribution.by_dp_rank", a.by_dp_rank),
            "by_stage": t.top(f"{p}attribution.by_stage", a.by_stage),
            "by_optype_per_step": {
                k: t.top(f"{p}attribution.by_optype_per_step.{k}", v, max_step_keys)
                for k, v in t.keys(f"{p}attribution.by_optype_per_step", a.by_optype_per_step, worst).items()
            },
            "by_dp_rank_per_step": {
                k: t.top(f"{p}attribution.by_dp_rank_per_step.{k}", v, max_step_keys)
                for k, v in t.keys(
                    f"{p}attribution.by_dp_rank_per_step", a.by_dp_rank_per_step, worst
                ).items()
            },
            "by_stage_per_step": {
                k: t.top(f"{p}attribution.by_stage_per_step.{k}", v, max_step_keys)
                for k, v in t.keys(f"{p}attribution.by_stage_per_step", a.by_stage_per_step, worst).items()
            },
            "by_worker": t.head(f"{p}attribution.by_worker", workers, max_workers),
        }
    )
    st = report.step_times
    step_times = st.model_copy(
        update={
            "actual": t.keys(f"{p}step_times.actual", st.actual, worst),
            "no_delay": t.keys(f"{p}step_times.no_delay", st.no_delay, worst),
            "ideal": t.keys(f"{p}step_times.ideal", st.ideal, worst),
        }
    )
    return report.model_copy(
        update={
            "step_slowdown": t.top(f"{p}step_slowdown", report.step_slowdown),
            "step_launch_gap": t.keys(
                f"{p}step_launch_gap", report.step_launch_gap, set(t.top("_", report.step_slowdown))
            ),
            "attribution": attribution,
            "step_times": step_times,
            "m_s_by_stage": t.keys(
                f"{p}m_s_by_stage",
                report.m_s_by_stage,
                set(t.top("_", {k: v or 0.0 for k, v in report.m_s_by_stage.items()})),
            ),
            "fix_ratios": report.fix_ratios.model_copy(
                update={
                    "by_stage": t.keys(
                        f"{p}fix_ratios.by_stage",
                        report.fix_ratios.by_stage,
                        set(t.top("_", {k: v or 0.0 for k, v in report.m_s_by_stage.items()})),
                    )
                }
            ),
            "steps": t.head(f"{p}steps", report.steps, 256),
            "notes": t.head(f"{p}notes", report.notes, MAX_NOTES),
        }
    )


def rounded(value: Any, digits: int = 4) -> Any:
    """``value`` with every float cut to ``digits`` significant digits (values of 1000 and more to
    one decimal, so timestamps and byte counts keep their integer part): what a reader can use
    from a simulated slowdown or a duration, at half the characters of a full float."""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return value
        return round(value, 1) if abs(value) >= 1000 else float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    return value


def compact_result(model: BaseModel) -> CallToolResult:
    """A tool result whose text block is the model's compact JSON with numbers rounded to
    meaningful digits (``rounded``; the SDK's default indents the full floats, which more than
    doubles what an assistant's context pays for) and whose structured content is the same
    object at full precision."""
    full = model.model_dump(mode="json")
    text = json.dumps(rounded(full), separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=full)


def _finish(t: Trimmer) -> dict[str, int]:
    t.omitted.pop("_", None)
    return dict(sorted(t.omitted.items()))


class WhatIfResult(BaseModel):
    """run_whatif's answer: the (bounded) standard report, and the scenario when one was asked."""

    trace_id: str
    slowdown: float = Field(description="job slowdown S (1.0 = ideal; >= 1.1 straggling)")
    wasted_fraction: float = Field(description="share of GPU time lost to straggling, 1 - 1/S")
    scenario: ScenarioResult | None = Field(
        None,
        description="the selected subset idealised (or its communication made free); "
        "speedup = t_orig / t_after",
    )
    report: WhatIfReport = Field(description="the standard report, long parts capped (see omitted)")
    truncated: bool
    omitted: dict[str, int] = Field(description="entries held back per capped field")
    full_report: str = Field(description="REST path of the full report")


def whatif_result(trace_id: str, report: WhatIfReport, scenario: ScenarioResult | None) -> WhatIfResult:
    t = Trimmer()
    trimmed = trim_report(report, t)
    if scenario is not None:
        t_sc = Trimmer()
        scenario = scenario.model_copy(
            update={
                "step_times_orig": t_sc.keys(
                    "scenario.step_times_orig", scenario.step_times_orig, set(trimmed.step_slowdown)
                ),
                "step_times_after": t_sc.keys(
                    "scenario.step_times_after", scenario.step_times_after, set(trimmed.step_slowdown)
                ),
            }
        )
        t.omitted.update(t_sc.omitted)
    omitted = _finish(t)
    return WhatIfResult(
        trace_id=trace_id,
        slowdown=report.slowdown,
        wasted_fraction=report.wasted_fraction,
        scenario=scenario,
        report=trimmed,
        truncated=bool(omitted),
        omitted=omitted,
        full_report=f"/api/traces/{trace_id}/whatif",
    )


# -- diagnosis ------------------------------------------------------------------------------------


class DiagnosisView(Diagnosis):
    """The diagnose shape (``straggler-lens diagnose --json``) with its long lists capped."""

    trace_id: str
    truncated: bool
    omitted: dict[str, int] = Field(description="entries held back per capped field")
    full_diagnosis: str = Field(description="REST path of the full diagnosis")
    heatmap_png: str = Field(description="REST path of the heatmap PNG (or call get_heatmap)")


def diagnosis_view(trace_id: str, d: Diagnosis) -> DiagnosisView:
    t = Trimmer()
    # the diagnosis is about causes: its embedded report is cut harder than run_whatif's
    report = trim_report(d.report, t, prefix="report.", max_steps=3, max_step_keys=8, max_workers=8)
    body = d.model_copy(
        update={
            "causes": t.head("causes", d.causes, MAX_CAUSES),
            "remedies": t.head("remedies", d.remedies, MAX_CAUSES),
            "notes": t.head("notes", d.notes, MAX_NOTES),
            "report": report,
        }
    )
    omitted = _finish(t)
    return DiagnosisView(
        **dict(body),
        trace_id=trace_id,
        truncated=bool(omitted),
        omitted=omitted,
        full_diagnosis=f"/api/traces/{trace_id}/diagnosis",
        heatmap_png=f"/api/traces/{trace_id}/heatmap.png",
    )


class PatternsView(BaseModel):
    fidelity: Fidelity = Field(description="the diagnosis's fidelity verdict, first")
    trace_id: str
    slowdown: float
    straggling: bool
    causes: list[CauseMatch] = Field(
        description="matching causes, largest marginal gain first; [] for a healthy job"
    )
    total: int
    truncated: bool


def patterns_view(trace_id: str, d: Diagnosis) -> PatternsView:
    return PatternsView(
        fidelity=d.fidelity,
        trace_id=trace_id,
        slowdown=d.slowdown,
        straggling=d.straggling,
        causes=d.causes[:MAX_CAUSES],
        total=len(d.causes),
        truncated=len(d.causes) > MAX_CAUSES,
    )


class RemediesView(BaseModel):
    fidelity: Fidelity = Field(description="the diagnosis's fidelity verdict, first")
    trace_id: str
    remedies: list[Remedy] = Field(description="one per detected cause, with the simulated speedup")
    total: int
    truncated: bool


def remedies_view(trace_id: str, d: Diagnosis) -> RemediesView:
    return RemediesView(
        fidelity=d.fidelity,
        trace_id=trace_id,
        remedies=d.remedies[:MAX_CAUSES],
        total=len(d.remedies),
        truncated=len(d.remedies) > MAX_CAUSES,
    )


class HeatmapView(BaseModel):
    """get_heatmap's structured part (the PNG travels as image content)."""

    trace_id: str
    heatmap: Heatmap
    grid: str = Field(description="the same heatmap as fixed-width text")
    hottest: dict[str, str | float] = Field(description="the slowest cell: dp / pp labels and value")
    png_bytes: int
    png_url: str


def heatmap_view(trace_id: str, hm: Heatmap, grid: str, png_bytes: int) -> HeatmapView:
    r, c, v = hm.hottest()
    step = f"?step={hm.step}" if hm.step is not None else ""
    return HeatmapView(
        trace_id=trace_id,
        heatmap=hm,
        grid=grid,
        hottest={"pp": hm.pp_labels[r], "dp": hm.dp_labels[c], "value": v},
        png_bytes=png_bytes,
        png_url=f"/api/traces/{trace_id}/heatmap.png{step}",
    )
