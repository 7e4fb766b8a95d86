"""A bounded, filterable page of the incident vocabulary for the ``vocab`` tool.

The full vocabulary is about 53 kB (346 tags, 145 synonyms); the default page keeps the small
parts whole (categories, causes, topics) and the ``limit`` most used tags, and leaves the query
synonyms to ``section="synonyms"``: about 9 kB. ``GET /api/vocab`` keeps the full document.
"""

from __future__ import annotations

from pydantic import Field

from incidents.search import VocabEntry, Vocabulary


class VocabPage(Vocabulary):
    """The ``Vocabulary`` shape, with tags and synonyms paged and every part filtered."""

    section: str = Field(description="the part asked for ('all' = categories, causes, topics, tags)")
    query: str = Field(description="the substring filter applied ('' = none)")
    tags_total: int = Field(description="tags matching the filter (this page holds limit of them)")
    synonyms_total: int = Field(description="synonym phrases matching the filter")
    next_offset: int | None = Field(description="offset of the next page of tags / synonyms, if any")
    truncated: bool = Field(
        description="entries matching the filter were left out (page on, or pick a section)"
    )
    full_vocabulary: str = "/api/vocab"


def _match(entry: VocabEntry, q: str) -> bool:
    return not q or q in entry.name.lower() or q in (entry.description or "").lower()


def vocab_page(v: Vocabulary, section: str, query: str, limit: int, offset: int) -> VocabPage:
    """The page of ``v`` for one section (or 'all'), filtered by ``query`` (case-insensitive)."""
    q = query.strip().lower()
    want = {section} if section != "all" else {"categories", "causes", "topics", "tags"}
    parts = {
        name: [e for e in getattr(v, name) if _match(e, q)] if name in want else []
        for name in ("categories", "causes", "topics", "tags")
    }
    tags = parts["tags"]
    syn_all = {
        k: t for k, t in v.synonyms.items() if not q or q in k.lower() or any(q in x.lower() for x in t)
    }
    synonyms = dict(list(syn_all.items())[offset : offset + limit]) if section == "synonyms" else {}
    paged = syn_all if section == "synonyms" else tags
    end = offset + limit
    left_out = (section == "all" and bool(syn_all)) or offset > 0 or end < len(paged)
    return VocabPage(
        categories=parts["categories"],
        causes=parts["causes"],
        topics=parts["topics"],
        tags=tags[offset:end],
        synonyms=synonyms,
        total_cases=v.total_cases,
        section=section,
        query=query,
        tags_total=len(tags),
        synonyms_total=len(syn_all),
        next_offset=end if end < len(paged) else None,
        truncated=left_out,
    )
