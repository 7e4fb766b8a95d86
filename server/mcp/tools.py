"""The MCP surface: tools, resources and a prompt over ``Lens`` (validate, call, wrap).

Every tool takes flat typed arguments (the schema an assistant sees), returns a pydantic model
(structured content with an output schema) and turns every failure a caller can fix into a
``ToolError`` whose text says what to do next. Results stay bounded: long lists are capped and
report ``total`` and ``truncated``; the full documents are on the REST routes. Tools whose
engine module is not installed are not registered (``server.app.features``).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

import anyio
import anyio.from_thread
from mcp.server import MCPServer
from mcp.server.apps import Apps
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from pydantic import Field

from server.core.models import DeleteResult, TraceInfo, TraceList, UploadResult
from server.core.runtime import app_version, features, open_lens
from server.core.service import Lens
from server.core.settings import Settings
from server.core.staging import StagedFile, UploadBudget
from server.mcp.app import app_tools
from server.mcp.plain_errors import plain_argument_errors
from server.mcp.shared import (
    DESTRUCTIVE,
    NULL_IS_EMPTY,
    READ_ONLY,
    UPLOAD,
    Limit,
    Offset,
    Size,
    TraceId,
    tool_errors,
)
from server.mcp.slim import slim_schemas
from server.mcp.upload import (
    InlineFile,
    copy_file,
    decode_inline,
    read_options,
    server_side_sources,
    stage_inline,
)

P = ParamSpec("P")
R = TypeVar("R")

INSTRUCTIONS = """Straggler Lens finds and explains stragglers in distributed LLM training traces.
Flow: upload_trace (or POST /api/traces for files over 1 MiB) -> trace_id; diagnose(trace_id) gives
the slowdown, the ranked causes with their location (DP rank x PP stage), remedies with simulated
gains and similar past incidents; get_heatmap shows where the slowdown sits; run_whatif answers
"what if these ops/ranks/steps ran at their typical speed". Incident tools search a library of
public straggler incidents. All trace tools take the trace_id handle; list_traces shows stored ones."""


def build_mcp(settings: Settings, holder: Any, app_html: str | None = None) -> MCPServer[Any]:
    """The MCP server. ``holder.lens`` is set by the app's lifespan; when the MCP server runs on
    its own (the SDK's in-process client), its lifespan opens a ``Lens`` itself. ``app_html``
    is the MCP App document (``server.web.app_html``); with it, ``diagnose`` and ``get_heatmap``
    are bound to the App (``server.mcp.app``)."""

    @asynccontextmanager
    async def lifespan(server: MCPServer[Any]) -> AsyncIterator[Lens]:
        if holder.lens is not None:
            yield holder.lens
            return
        async with open_lens(settings) as lens:
            holder.lens = lens
            try:
                yield lens
            finally:
                holder.lens = None

    have = features()

    def lens() -> Lens:
        lens_: Lens = holder.require()
        return lens_

    # the App's tools and resource first: the SDK applies an extension when it builds the server
    apps = Apps()
    plain_tools = app_tools(apps, lens, have, app_html)
    mcp: MCPServer[Any] = MCPServer(
        "straggler-lens",
        version=app_version(),
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        extensions=[apps] if app_html is not None else [],
    )
    for fn, kw in plain_tools:
        mcp.add_tool(fn, **kw)

    async def run(fn: Callable[..., R], *args: Any) -> R:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args))

    # -- traces ----------------------------------------------------------------------------------

    @mcp.tool(title="Upload a trace", annotations=UPLOAD)
    @tool_errors
    async def upload_trace(
        content: Annotated[str, NULL_IS_EMPTY, Field(description="file content, at most 1 MiB decoded")] = "",
        encoding: Annotated[Literal["text", "base64"], Field(description="how content is encoded")] = "text",
        filename: Annotated[
            str,
            NULL_IS_EMPTY,
            Field(max_length=255, description="file name (its suffix helps detect the format)"),
        ] = "",
        files: Annotated[
            list[InlineFile] | None,
            Field(max_length=4096, description="several inline files (per-rank traces, meta yaml)"),
        ] = None,
        path: Annotated[
            str,
            NULL_IS_EMPTY,
            Field(max_length=4096, description="server-side file, folder or archive inside an --allow-dir"),
        ] = "",
        format: Annotated[
            str,
            NULL_IS_EMPTY,
            Field(
                max_length=40,
                description="reader name (artifact, native, kineto, ndtimeline); default: detect",
            ),
        ] = "",
        dp: Size = None,
        pp: Size = None,
        tp: Size = None,
        cp: Size = None,
        vpp: Annotated[int | None, Field(ge=1, le=1024, description="model chunks per stage")] = None,
        gpus_per_host: Annotated[int | None, Field(ge=1, le=1024, description="GPUs per host")] = None,
        layers_per_stage: Annotated[
            list[Annotated[int, Field(ge=1)]] | None,
            Field(max_length=4096, description="transformer layers on each PP stage, e.g. [9, 9, 9, 9]"),
        ] = None,
        partial: Annotated[
            bool, Field(description="analyse a subset of the job's ranks as a smaller job")
        ] = False,
    ) -> UploadResult:
        """Store one job's trace and return its trace_id and a summary (job shape, steps, ops, format).

        Give exactly one of: inline `content` (one file), inline `files` (several: per-rank
        files plus an optional meta .yaml), or a server-side `path` (file, folder or archive inside
        an allowed folder; a trace file's meta yaml beside it is read too). Inline uploads hold
        at most 1 MiB decoded in all; larger ones go to POST /api/traces. Archives (.tar.gz, .tgz,
        .tar, .zip) are unpacked. Uploading the same content again returns the same trace_id.
        """
        L = lens()
        if sum(map(bool, (content, files, path))) != 1:
            raise ToolError(
                "give exactly one of `content` (one inline file), `files` (several inline files) "
                "or `path` (server-side file, folder or archive)"
            )
        options = read_options(
            format,
            partial,
            layers_per_stage,
            dp=dp,
            pp=pp,
            tp=tp,
            cp=cp,
            vpp=vpp,
            gpus_per_host=gpus_per_host,
        )
        budget = UploadBudget(L.settings.max_upload_bytes, L.settings.max_decompressed_bytes)
        cap = L.settings.max_inline_bytes

        def staged(write: Callable[[Path], list[StagedFile]]) -> tuple[Path, list[StagedFile]]:
            # a failed write (413, bad gzip, path refused) must not leave its staging folder behind
            staging = L.store.staging_dir()
            try:
                return staging, write(staging)
            except BaseException:
                L.store.discard(staging)
                raise

        if content or files:
            items = inline_items(content, encoding, filename, files or [], cap)
            staging, staged_files = await run(staged, lambda d: stage_inline(d, items, budget))
            label = filename or ", ".join(name for name, _ in items)
        else:
            sources = server_side_sources(path, L.settings.allow_dirs)
            staging, staged_files = await run(
                staged, lambda d: [copy_file(src, d, budget) for src in sources]
            )
            label = path
        return await run(L.ingest, staging, staged_files, options, label[:200])

    @mcp.tool(title="List stored traces", annotations=READ_ONLY)
    @tool_errors
    async def list_traces(limit: Limit = 20, offset: Offset = 0) -> TraceList:
        """List stored traces, newest first, with their job shape and which results are cached."""
        L = lens()

        def page() -> TraceList:
            total, recs = L.store.page(limit, offset)
            items = [L.info(r) for r in recs]
            return TraceList(
                total=total, limit=limit, offset=offset, truncated=offset + len(items) < total, items=items
            )

        return await run(page)

    @mcp.tool(title="Describe a trace", annotations=READ_ONLY)
    @tool_errors
    async def describe_trace(trace_id: TraceId) -> TraceInfo:
        """Job shape, steps, op counts, detected format and reader notes of one stored trace."""
        L = lens()
        return L.info(L.record(trace_id))  # two indexed SQLite reads: cheaper than a thread hop

    from server.mcp.fleet import register_fleet_tools

    register_fleet_tools(mcp, lens)
    @mcp.tool(title="Delete a stored trace", annotations=DESTRUCTIVE)
    @tool_errors
    async def delete_trace(trace_id: TraceId) -> DeleteResult:
        """Delete a stored trace: its files, its cached results and its trace_id (which then stops
        working). Other traces are not touched."""
        await run(lens().delete, trace_id)
        return DeleteResult(trace_id=trace_id, deleted=True)

    if have["whatif"]:
        from server.mcp.analysis import register_analysis_tools

        register_analysis_tools(mcp, lens, have)
        from server.mcp.timeline import register_timeline_tools

        register_timeline_tools(mcp, lens)
    if have["incidents"]:
        from server.mcp.incidents import register_incident_tools

        register_incident_tools(mcp, lens, have)
    from server.mcp.jobs import register_job_tools

    register_job_tools(mcp, lambda: getattr(holder, "monitor", None))

    plain_argument_errors(mcp)
    slim_schemas(mcp)

    # -- resources and prompt ----------------------------------------------------------------------

    @mcp.resource("trace://{trace_id}", mime_type="application/json", title="Stored trace summary")
    async def trace_resource(trace_id: str) -> str:
        """Summary of a stored trace (the describe_trace answer)."""
        L = lens()
        rec = L.store.get(trace_id)
        if rec is None:
            raise ResourceNotFoundError(f"no trace {trace_id}")
        return (await run(L.info, rec)).model_dump_json()

    @mcp.prompt(title="Diagnose a slow training job")
    def diagnose_slow_job(
        trace_id: Annotated[str, Field(description="trace handle, or empty to start by uploading")] = "",
    ) -> str:
        """Walk through diagnosing a slow distributed training job with Straggler Lens."""
        start = (
            f"The trace is stored as trace_id={trace_id}."
            if trace_id
            else "First get a trace: call list_traces to reuse a stored one, or upload_trace "
            "(inline ≤ 1 MiB or a server-side path; bigger files: POST /api/traces)."
        )
        return (
            "You are diagnosing why a distributed LLM training job runs slower than it should. "
            f"{start}\n"
            "1. describe_trace: check the job shape (DP x PP) and the number of steps.\n"
            "2. diagnose: read the job slowdown S (1.0 = ideal; >= 1.1 counts as straggling), the "
            "wasted GPU share, and the ranked causes with their location.\n"
            "3. get_heatmap: confirm where the slowdown sits (a hot row = one PP stage, a hot cell = one "
            "worker, a moving hot spot = changing DP ranks).\n"
            "4. run_whatif with a selector (optypes, dp_ranks, pp_ranks, steps) to test a hypothesis: "
            "how much of the slowdown disappears when only that subset runs at its typical speed.\n"
            "5. similar_incidents with the trace_id: what happened in comparable real incidents and "
            "how they were fixed.\n"
            "Finish with: the cause, the evidence (numbers), the fix, and the gain the simulation predicts."
        )

    return mcp


def inline_items(
    content: str, encoding: str, filename: str, files: list[InlineFile], cap: int
) -> list[tuple[str, bytes]]:
    """The decoded inline files, within ``cap`` bytes in all."""
    if content:
        return [(filename or "trace", decode_inline(content, encoding, cap))]
    items: list[tuple[str, bytes]] = []
    left = cap
    for i, f in enumerate(files):
        data = decode_inline(f.content, f.encoding, max(left, 0), what=f"files[{i}] ({f.name})")
        left -= len(data)
        items.append((f.name, data))
    return items
