"""Calls into ``incidents.search`` / ``incidents.similar`` with the server's library, mapping the
library's exceptions to ``ApiError`` once for REST and MCP alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from server.core.errors import ApiError

T = TypeVar("T")


def call(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """Run an incident-library function; unknown ids -> 404, bad filters -> 400."""
    from incidents.schema import InvalidFilterError, UnknownIncidentError, UnknownTopicError

    try:
        return fn(*args, **kw)
    except (UnknownIncidentError, UnknownTopicError) as exc:
        raise ApiError(404, "not_found", str(exc)) from exc
    except InvalidFilterError as exc:
        raise ApiError(400, "bad_filter", str(exc)) from exc


def search_or_list(library: Any, query: str | None, filters: dict[str, Any], limit: int, offset: int) -> Any:
    """``search_incidents`` for a non-empty query, else ``list_incidents`` with the same filters."""
    from incidents.search import list_incidents, search_incidents

    given = {k: v for k, v in filters.items() if v is not None}
    if query and query.strip():
        return call(search_incidents, query, **given, limit=limit, offset=offset, library=library)
    return call(list_incidents, given, limit=limit, offset=offset, library=library)


def similar(lens: Any, *, case_id: str | None, trace_id: str | None, text: str | None, limit: int) -> Any:
    """``incidents.similar.similar_incidents`` for an incident id, a stored trace's diagnosis
    (its cause signatures) or a text."""
    from incidents.search import IncidentResults
    from incidents.similar import similar_incidents

    if lens.library is None:
        raise ApiError(503, "no_library", "the incident library is not installed on this server")
    if trace_id is not None:
        signatures = lens.diagnosis(trace_id).signatures()
        if not signatures:
            return IncidentResults(
                total=0,
                results=[],
                next_offset=None,
                message="the diagnosis of this trace found no straggler cause; nothing to compare",
            )
        return call(similar_incidents, signatures=signatures, limit=limit, library=lens.library)
    return call(similar_incidents, case_id=case_id, text=text, limit=limit, library=lens.library)
