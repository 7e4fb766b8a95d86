"""MCP tools over the incident library: search, get, list, topics, vocabulary, similar incidents,
and the ``incident://{id}`` resource.

Imported only when ``incidents.search`` is installed (``server.app.features``); the types are
imported at module level because the SDK evaluates the tools' annotations in this module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import CallToolResult
from pydantic import Field

from incidents.schema import Case
from incidents.search import IncidentResults, TopicCases, Vocabulary, get_incident, get_topic, vocab
from server.core.errors import ApiError
from server.core.incident_glue import call, search_or_list
from server.core.service import Lens
from server.mcp.shared import NULL_IS_EMPTY, READ_ONLY, Limit, Offset, tool_errors
from server.mcp.views import compact_result
from server.mcp.vocab_page import VocabPage, vocab_page

MAX_TOPIC_CASES = 50

Category = Annotated[
    str, NULL_IS_EMPTY, Field(max_length=80, description="incident category (see vocab), e.g. gc-pause")
]
Cause = Annotated[
    str, NULL_IS_EMPTY, Field(max_length=80, description="cause id (see vocab), e.g. stage-imbalance")
]
Tag = Annotated[str, NULL_IS_EMPTY, Field(max_length=80, description="tag (see vocab)")]
Topic = Annotated[str, NULL_IS_EMPTY, Field(max_length=80, description="topic name (see vocab)")]
Org = Annotated[str, NULL_IS_EMPTY, Field(max_length=80, description="organisation, e.g. Meta")]
YearFrom = Annotated[int | None, Field(ge=1990, le=2100, description="earliest year")]
YearTo = Annotated[int | None, Field(ge=1990, le=2100, description="latest year")]
FILTER_NAMES = ("category", "cause", "tag", "topic", "org", "year_from", "year_to")


def filters_of(arguments: dict[str, Any]) -> dict[str, Any]:
    """The incident filters among a tool's arguments (``locals()`` before any other assignment):
    the search and list tools take the same flat filter arguments, named once here."""
    return {k: (arguments[k] if arguments[k] != "" else None) for k in FILTER_NAMES}


def register_incident_tools(mcp: MCPServer[Any], lens: Callable[[], Lens], have: dict[str, bool]) -> None:
    async def run(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return await anyio.to_thread.run_sync(functools.partial(call, fn, *args, **kw))

    def lib() -> Any:
        return lens().library

    async def find(query: str | None, filters: dict[str, Any], limit: int, offset: int) -> IncidentResults:
        result: IncidentResults = await anyio.to_thread.run_sync(
            search_or_list, lib(), query, filters, limit, offset
        )
        return result

    @mcp.tool(name="search_incidents", title="Search past incidents", annotations=READ_ONLY)
    @tool_errors
    async def search_incidents_tool(
        query: Annotated[str, Field(description="free text, e.g. 'last pipeline stage slow loss layer'")],
        category: Category = "",
        cause: Cause = "",
        tag: Tag = "",
        topic: Topic = "",
        org: Org = "",
        year_from: YearFrom = None,
        year_to: YearTo = None,
        limit: Annotated[int, Field(ge=1, le=100, description="page size")] = 10,
        offset: Offset = 0,
    ) -> IncidentResults:
        """Search public straggler / slow-training incidents by free text, most relevant first.

        Tolerates typos and synonyms; filters narrow the result. `next_offset` pages on; get_incident
        gives the full case.
        """
        return await find(query, filters_of(locals()), limit, offset)

    @mcp.tool(name="list_incidents", title="List past incidents", annotations=READ_ONLY)
    @tool_errors
    async def list_incidents_tool(
        category: Category = "",
        cause: Cause = "",
        tag: Tag = "",
        topic: Topic = "",
        org: Org = "",
        year_from: YearFrom = None,
        year_to: YearTo = None,
        limit: Limit = 20,
        offset: Offset = 0,
    ) -> IncidentResults:
        """List incidents matching the filters (all when none), newest first."""
        return await find(None, filters_of(locals()), limit, offset)

    @mcp.tool(name="get_incident", title="Get one incident", annotations=READ_ONLY)
    @tool_errors
    async def get_incident_tool(
        id: Annotated[str, Field(description="incident id such as IL-0417", min_length=1, max_length=80)],
    ) -> Case:
        """The full case: what happened, symptoms, root cause, signature, impact, mitigation, sources."""
        case: Case = await run(get_incident, id, library=lib())
        return case

    @mcp.tool(name="get_topic", title="Get a topic", annotations=READ_ONLY)
    @tool_errors
    async def get_topic_tool(
        name: Annotated[str, Field(description="topic name (see vocab)", min_length=1, max_length=80)],
    ) -> TopicCases:
        """A topic's explanation and the incidents filed under it (newest first, first 50)."""
        topic: TopicCases = await run(get_topic, name, library=lib())
        if len(topic.cases) > MAX_TOPIC_CASES:
            topic = topic.model_copy(update={"cases": topic.cases[:MAX_TOPIC_CASES]})
        return topic

    @mcp.tool(name="vocab", title="Vocabulary", annotations=READ_ONLY)
    @tool_errors
    async def vocab_tool(
        section: Annotated[
            Literal["all", "categories", "causes", "tags", "topics", "synonyms"],
            Field(description="one part only; 'all' = categories, causes, topics and a page of tags"),
        ] = "all",
        query: Annotated[
            str,
            NULL_IS_EMPTY,
            Field(max_length=80, description="keep entries whose name or text contains this"),
        ] = "",
        limit: Annotated[int, Field(ge=1, le=500, description="tags (or synonyms) per page")] = 40,
        offset: Offset = 0,
    ) -> Annotated[CallToolResult, VocabPage]:
        """Categories, cause ids (with descriptions), topics and the most used tags, with case counts:
        the values the incident filters accept and the cause ids diagnoses use. Tags and synonyms
        are paged (`limit`, `offset`, `next_offset`); `query` filters every part by substring."""
        result: Vocabulary = await run(vocab, library=lib())
        return compact_result(vocab_page(result, section, query, limit, offset))

    @mcp.resource("incident://{incident_id}", mime_type="application/json", title="Incident case")
    async def incident_resource(incident_id: str) -> str:
        """One incident case as JSON."""
        try:
            case = await run(get_incident, incident_id, library=lib())
        except ApiError as exc:
            raise ResourceNotFoundError(exc.message) from exc
        return str(case.model_dump_json())

    if have.get("similar"):
        register_similar_tool(mcp, lens)


def register_similar_tool(mcp: MCPServer[Any], lens: Callable[[], Lens]) -> None:
    from server.core.incident_glue import similar

    @mcp.tool(name="similar_incidents", title="Similar past incidents", annotations=READ_ONLY)
    @tool_errors
    async def similar_incidents_tool(
        case_id: Annotated[
            str, NULL_IS_EMPTY, Field(max_length=80, description="an incident id: incidents like this one")
        ] = "",
        trace_id: Annotated[
            str,
            NULL_IS_EMPTY,
            Field(max_length=64, description="a stored trace: incidents like its diagnosis"),
        ] = "",
        text: Annotated[
            str, NULL_IS_EMPTY, Field(max_length=4000, description="a description of the symptoms")
        ] = "",
        limit: Annotated[int, Field(ge=1, le=20, description="how many")] = 5,
    ) -> IncidentResults:
        """Past incidents most similar to an incident, to a stored trace's diagnosis, or to a text."""
        given = [k for k, v in (("case_id", case_id), ("trace_id", trace_id), ("text", text)) if v]
        if len(given) != 1:
            raise ToolError("give exactly one of case_id, trace_id or text")
        return await anyio.to_thread.run_sync(
            functools.partial(
                similar,
                lens(),
                case_id=case_id or None,
                trace_id=trace_id or None,
                text=text or None,
                limit=limit,
            )
        )
