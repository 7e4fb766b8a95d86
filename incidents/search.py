"""Plain functions over the incident library: search, get, list, topics and vocabulary.

These are what the MCP tools, the REST routes and the CLI call. Each takes an optional ``library``
(default: the packaged one, loaded and indexed once). Unknown ids and topics raise
``UnknownIncidentError`` / ``UnknownTopicError`` (``LookupError``); filters outside the vocabulary
raise ``InvalidFilterError`` (``ValueError``); an empty result carries a ``message`` saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from rapidfuzz import process

from diagnosers.vocab import CATEGORY_TO_CAUSES, CAUSE_DESCRIPTIONS, CauseId
from incidents.library import Library, load_library
from incidents.schema import CATEGORIES, Case, InvalidFilterError
from incidents.synonyms import SYNONYMS

MAX_LIMIT = 100
# Cases scoring below this (0..100) are not counted as matches: a stray common word ("gpu") alone
# in a long query does not make a case relevant.
MIN_SCORE = 20.0
YEAR_RANGE = (1990, 2100)


class IncidentHit(BaseModel):
    """One case in a result list."""

    id: str
    title: str
    score: float | None = Field(description="0..100 relevance (search, similar); null for list")
    category: str
    causes: list[str]
    tags: list[str]
    organization: str
    date: str
    reasons: list[str] = Field(default_factory=list)
    matched_fields: list[str] = Field(default_factory=list)


class IncidentResults(BaseModel):
    """A page of cases: ``total`` matches, this page's ``results``, and the offset of the next page."""

    total: int
    results: list[IncidentHit]
    next_offset: int | None
    message: str | None = Field(default=None, description="set when nothing matched, saying why")

    def __iter__(self) -> Iterator[IncidentHit]:  # type: ignore[override]
        """Iterate over this page's hits, so callers that expect a list of matches (the diagnosis
        engine's ``similar`` hook) can use the result directly."""
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def contract(self) -> dict[str, Any]:
        """The CLI's public JSON shape: total, results (id, title, score, category, causes, tags,
        reasons) and next_offset."""
        keys = {"id", "title", "score", "category", "causes", "tags", "reasons"}
        return {
            "total": self.total,
            "results": [hit.model_dump(include=keys) for hit in self.results],
            "next_offset": self.next_offset,
        }


class IncidentFilters(BaseModel):
    """Filters shared by search and list; every given filter must hold (AND)."""

    model_config = ConfigDict(extra="forbid")

    category: str | None = None
    cause: str | None = None
    tag: str | None = None
    topic: str | None = None
    org: str | None = None
    year_from: int | None = None
    year_to: int | None = None

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.model_dump(exclude_none=True).items()]
        return ", ".join(parts)


class TopicCases(BaseModel):
    """A topic with its description and the cases filed under it (newest first)."""

    name: str
    title: str
    description: str
    total: int
    cases: list[IncidentHit]


class VocabEntry(BaseModel):
    name: str
    count: int
    description: str | None = None
    causes: list[str] | None = None


class Vocabulary(BaseModel):
    """The controlled vocabulary with usage counts: what filters and queries accept."""

    categories: list[VocabEntry]
    causes: list[VocabEntry]
    tags: list[VocabEntry]
    topics: list[VocabEntry]
    synonyms: dict[str, list[str]]
    total_cases: int


def _hit(case: Case, score: float | None = None, reasons: list[str] | None = None,
         matched: list[str] | None = None) -> IncidentHit:
    return IncidentHit(
        id=case.id, title=case.title, score=None if score is None else round(float(score), 1),
        category=case.category, causes=[c.value for c in case.causes], tags=list(case.tags),
        organization=case.organization, date=case.date, reasons=reasons or [], matched_fields=matched or [],
    )


def _check_page(limit: int, offset: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidFilterError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if offset < 0:
        raise InvalidFilterError(f"offset must be >= 0, got {offset}")


def _near(value: str, choices: list[str]) -> str:
    close = [c for c, score, _ in process.extract(value, choices, limit=3) if score >= 60]
    return f" (did you mean {', '.join(close)}?)" if close else ""


def filter_mask(lib: Library, filters: IncidentFilters) -> np.ndarray:
    """Boolean mask over ``lib.index.cases`` for ``filters``; bad values raise InvalidFilterError."""
    idx = lib.index
    mask = np.ones(idx.n, dtype=bool)
    f = filters
    if f.category is not None:
        cat = f.category.strip().lower()
        if cat not in CATEGORY_TO_CAUSES:
            raise InvalidFilterError(
                f"unknown category {f.category!r}{_near(cat, list(CATEGORIES))}; "
                f"categories: {', '.join(CATEGORIES)}"
            )
        mask &= idx.category_idx == CATEGORIES.index(cat)
    if f.cause is not None:
        try:
            cause = CauseId(f.cause.strip().lower())
        except ValueError:
            ids = [c.value for c in CauseId]
            raise InvalidFilterError(
                f"unknown cause id {f.cause!r}{_near(f.cause, ids)}; cause ids: {', '.join(ids)}"
            ) from None
        mask &= idx.cause_matrix[:, list(CauseId).index(cause)]
    if f.tag is not None:
        tag = f.tag.strip().casefold()
        p = idx.postings.get(f"tag:{tag}")
        if p is None:
            known = sorted({t.casefold() for c in idx.cases for t in c.tags})
            raise InvalidFilterError(
                f"unknown tag {f.tag!r}{_near(tag, known)}; `incidents vocab` lists the tags"
            )
        tag_mask = np.zeros(idx.n, dtype=bool)
        tag_mask[p.cases] = True
        mask &= tag_mask
    if f.topic is not None:
        topic = lib.topic(f.topic)  # UnknownTopicError names the known topics
        p = idx.postings.get(f"topic:{topic.name}")
        topic_mask = np.zeros(idx.n, dtype=bool)
        if p is not None:
            topic_mask[p.cases] = True
        mask &= topic_mask
    if f.org is not None:
        needle = f.org.strip().casefold()
        if not needle:
            raise InvalidFilterError("org filter is empty")
        mask &= np.array([needle in org for org in idx.org_text], dtype=bool)
    lo, hi = YEAR_RANGE
    for name, year in (("year_from", f.year_from), ("year_to", f.year_to)):
        if year is not None and not lo <= year <= hi:
            raise InvalidFilterError(f"{name} must be a year between {lo} and {hi}, got {year}")
    if f.year_from is not None and f.year_to is not None and f.year_from > f.year_to:
        raise InvalidFilterError(f"year_from ({f.year_from}) is after year_to ({f.year_to})")
    # a case overlaps [year_from, year_to] when its date (or date range) touches it
    if f.year_from is not None:
        mask &= idx.year_last >= f.year_from
    if f.year_to is not None:
        mask &= idx.year_first <= f.year_to
    return mask


def _paged(order: Sequence[int] | np.ndarray, offset: int, limit: int, hit: Callable[[int], IncidentHit],
           empty: str, noun: str) -> IncidentResults:
    """One page of ``order`` (case positions, best first) with the total, ``next_offset`` (null on
    the last page) and a message when the page is empty: ``empty`` when nothing matched at all."""
    total = len(order)
    results = [hit(int(i)) for i in order[offset: offset + limit]]
    nxt = offset + limit if offset + limit < total else None
    message = None
    if total == 0:
        message = empty
    elif not results:
        message = f"offset {offset} is past the last {noun} ({total} in total)."
    return IncidentResults(total=total, results=results, next_offset=nxt, message=message)


def _empty_message(query: str | None, filters: IncidentFilters) -> str:
    described = filters.describe()
    if query is None:
        return f"No incidents match the filters {described}." if described else "The library is empty."
    with_filters = f" with filters {described}" if described else ""
    return f"No incidents match the query {query!r}{with_filters}."


def search_incidents(
    query: str,
    category: str | None = None,
    cause: str | None = None,
    tag: str | None = None,
    topic: str | None = None,
    org: str | None = None,
    year_from: int | None = None,
    year_to: int | None = None,
    limit: int = 10,
    offset: int = 0,
    *,
    library: Library | None = None,
) -> IncidentResults:
    """Rank cases for a free-text query, most relevant first.

    Typo- and word-order-tolerant (rapidfuzz over an inverted index; see ``incidents.index``), with
    field weights (title, aliases and tags above the body) and vocabulary synonyms ("garbage
    collection" finds ``gc-pause`` cases). Cases scoring under ``MIN_SCORE`` are not matches.
    Ties break by newer date, then id. ``next_offset`` is null on the last page.
    """
    if not isinstance(query, str) or not query.strip():
        raise InvalidFilterError("query is empty; use list_incidents (CLI: `incidents list`) to browse")
    _check_page(limit, offset)
    lib = library or load_library()
    filters = IncidentFilters(category=category, cause=cause, tag=tag, topic=topic, org=org,
                              year_from=year_from, year_to=year_to)
    mask = filter_mask(lib, filters)
    idx = lib.index
    scored = idx.score(query, allowed=mask, need=offset + limit, floor=MIN_SCORE)
    scores = scored.scores
    hits = np.flatnonzero(scores >= MIN_SCORE)
    if not scored.terms:
        hits = hits[:0]
    # rank: score desc (to the shown precision), then newer date, then id (cases are in id order)
    order = hits[np.lexsort((hits, -idx.date_key[hits], -np.round(scores[hits], 1)))]

    def hit(i: int) -> IncidentHit:
        reasons, matched = idx.explain(i, scored.terms)
        return _hit(idx.cases[i], float(scores[i]), reasons, matched)

    return _paged(order, offset, limit, hit, _empty_message(query, filters), "match")


def get_incident(case_id: str, *, library: Library | None = None) -> Case:
    """The full case for an id such as ``IL-0417`` (or its fact-sheet slug)."""
    if not isinstance(case_id, str) or not case_id.strip():
        raise InvalidFilterError("incident id is empty; ids look like IL-0417")
    return (library or load_library()).get(case_id)


def list_incidents(
    filters: IncidentFilters | dict[str, Any] | None = None,
    limit: int = 20,
    offset: int = 0,
    *,
    library: Library | None = None,
) -> IncidentResults:
    """Cases matching ``filters`` (all cases if none), newest first; ``score`` is null."""
    _check_page(limit, offset)
    if filters is None:
        filters = IncidentFilters()
    elif isinstance(filters, dict):
        unknown = set(filters) - set(IncidentFilters.model_fields)
        if unknown:
            raise InvalidFilterError(
                f"unknown filter(s) {', '.join(sorted(unknown))}; "
                f"filters: {', '.join(IncidentFilters.model_fields)}"
            )
        filters = IncidentFilters(**filters)
    lib = library or load_library()
    idx = lib.index
    hits = np.flatnonzero(filter_mask(lib, filters))
    order = hits[np.lexsort((hits, -idx.date_key[hits]))]
    return _paged(order, offset, limit, lambda i: _hit(idx.cases[i]), _empty_message(None, filters), "case")


def get_topic(name: str, *, library: Library | None = None) -> TopicCases:
    """A topic's description and all its cases (newest first)."""
    lib = library or load_library()
    topic = lib.topic(name)
    listed = list_incidents(IncidentFilters(topic=topic.name), limit=MAX_LIMIT, library=lib)
    cases = list(listed.results)
    while listed.next_offset is not None:
        listed = list_incidents(IncidentFilters(topic=topic.name), limit=MAX_LIMIT,
                                offset=listed.next_offset, library=lib)
        cases.extend(listed.results)
    return TopicCases(name=topic.name, title=topic.title, description=topic.description,
                      total=len(cases), cases=cases)


def vocab(*, library: Library | None = None) -> Vocabulary:
    """Categories (with their cause ids), cause ids (with descriptions), tags and topics, each with
    the number of cases using it, plus the query synonyms."""
    lib = library or load_library()
    cases = list(lib.cases.values())
    cat_count = {c: 0 for c in CATEGORIES}
    cause_count: dict[CauseId, int] = {c: 0 for c in CauseId if c is not CauseId.NONE}
    tag_count: dict[str, int] = {}
    topic_count = dict.fromkeys(lib.topics, 0)
    for case in cases:
        cat_count[case.category] += 1
        for c in case.causes:
            cause_count[c] += 1
        for t in case.tags:
            tag_count[t] = tag_count.get(t, 0) + 1
        for t in case.topics:
            topic_count[t] += 1
    return Vocabulary(
        categories=[VocabEntry(name=c, count=n, causes=[x.value for x in CATEGORY_TO_CAUSES[c]])
                    for c, n in cat_count.items()],
        causes=[VocabEntry(name=c.value, count=n, description=CAUSE_DESCRIPTIONS[c])
                for c, n in cause_count.items()],
        tags=[VocabEntry(name=t, count=n)
              for t, n in sorted(tag_count.items(), key=lambda kv: (-kv[1], kv[0]))],
        topics=[VocabEntry(name=t, count=topic_count[t], description=lib.topics[t].title)
                for t in lib.topics],
        synonyms={phrase: list(targets) for phrase, targets in SYNONYMS.items()},
        total_cases=len(cases),
    )
