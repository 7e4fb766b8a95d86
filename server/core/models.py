"""Pydantic models of the server's own answers (the analysis models live in ``diagnosers``).

They are the output schemas of the MCP tools and the REST bodies, so every field says what it is.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class JobShape(BaseModel):
    dp: int = Field(description="data-parallel size")
    pp: int = Field(description="pipeline-parallel size (stages)")
    tp: int = Field(description="tensor-parallel size")
    cp: int = Field(description="context-parallel size")
    vpp: int = Field(description="virtual pipeline stages per stage")
    world_size: int = Field(description="GPUs in the job")
    workers: int = Field(description="traced workers (dp x pp)")
    trial_name: str


class TraceSummary(BaseModel):
    """What a stored trace holds: job shape, steps, ops, the detected format."""

    format: str | None = Field(description="reader that parsed the files")
    job: JobShape
    n_ops: int = Field(description="modelled operations in the trace")
    steps: list[int] = Field(description="traced step ids (first 50 when there are more)")
    n_steps: int
    ops_by_type: dict[str, int] = Field(description="op count per modelled op type")
    files: list[str] = Field(description="stored file names")
    notes: list[str] = Field(description="reader notes (first 20)")
    notes_total: int


class TraceInfo(BaseModel):
    """A stored trace: its handle, when it arrived, and which results are cached."""

    trace_id: str = Field(description="handle for every trace tool and /api/traces/{id} route")
    name: str
    created_at: str
    size_bytes: int
    summary: TraceSummary
    cached: list[str] = Field(description="results already computed (whatif, diagnosis, heatmap_png)")


class UploadResult(BaseModel):
    trace_id: str
    created: bool = Field(description="false when the same content was already stored")
    summary: TraceSummary


class DeleteResult(BaseModel):
    trace_id: str
    deleted: bool = Field(description="true: the trace, its files and its cached results are gone")


class TraceList(BaseModel):
    total: int
    limit: int
    offset: int
    truncated: bool = Field(description="more traces exist after this page; call again with offset+limit")
    items: list[TraceInfo]


class Health(BaseModel):
    status: str
    version: str
    traces: int
    incidents: int | None
    features: dict[str, bool]
    executor: dict[str, Any] | None = Field(
        default=None, description="heavy work: kind, workers, running, queued, max_queue"
    )


def summarize(trace: Any, files: list[str]) -> TraceSummary:
    """Summary of a parsed ``diagnosers.model.Trace``: counts only, bounded lists."""
    import numpy as np

    from diagnosers.model import OPTYPES

    meta = trace.meta
    steps = trace.steps
    codes, counts = np.unique(trace.ops.optype, return_counts=True)
    return TraceSummary(
        format=meta.source_format,
        job=JobShape(
            dp=meta.dp,
            pp=meta.pp,
            tp=meta.tp,
            cp=meta.cp,
            vpp=meta.vpp,
            world_size=meta.world_size,
            workers=meta.dp * meta.pp,
            trial_name=str(meta.trial_name),
        ),
        n_ops=len(trace.ops),
        steps=steps[:50],
        n_steps=len(steps),
        ops_by_type={OPTYPES[int(c)]: int(n) for c, n in zip(codes, counts, strict=True)},
        files=files,
        notes=list(trace.notes[:20]),
        notes_total=len(trace.notes),
    )
