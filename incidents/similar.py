"""Similar-case retrieval: from a case, from a diagnosis (cause signatures) or from free text.

The score is a hybrid of up to five components, each in [0, 1], averaged with these weights over
the components the probe supports (a diagnosis has causes and shapes but no tags or text):

=============  ======  ===================================================================
component      weight  value
=============  ======  ===================================================================
causes         0.25    mean of the weighted share of the probe's causes the case has and
                       the Jaccard index of both cause sets (a multi-cause case still
                       covers a single-cause diagnosis, but less than an exact match)
shape          0.40    per probe signature: the case has that cause, and its signature's
                       spatial / temporal / resource pattern agrees (1 per agreeing field,
                       0.3 where either side is unknown, ``CLOSENESS`` for near values such
                       as single-worker vs one-host, 0 otherwise), averaged
tags           0.15    Jaccard of tags (probe = a case)
text           0.20    cosine of tf-idf vectors over the whole case text
category       0.10    same broad category (probe = a case)
=============  ======  ===================================================================

A case the probe lists under ``related`` (or that lists the probe) gets +0.1 (curated links, as in
AIID's editor-confirmed similar incidents). When a diagnosis gives a ``location`` but no spatial
pattern, the spatial pattern is derived from it (one rank -> single-worker, one host -> one-host,
one PP rank across several DP ranks -> one-stage).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diagnosers.signature import CauseSignature
from diagnosers.vocab import CauseId, Location, Pattern, Resource, Spatial, Temporal
from incidents.index import SearchIndex
from incidents.library import Library, load_library
from incidents.schema import CATEGORIES, Case, InvalidFilterError
from incidents.search import MAX_LIMIT, IncidentHit, IncidentResults, _hit, _paged

WEIGHTS = {"causes": 0.25, "shape": 0.40, "tags": 0.15, "text": 0.20, "category": 0.10}
RELATED_BONUS = 0.10
# Matches below this combined score (0..100) are not counted.
MIN_SIMILARITY = 10.0

_CAUSES = list(CauseId)
_SPATIAL, _TEMPORAL, _RESOURCE = list(Spatial), list(Temporal), list(Resource)
UNKNOWN = -1
UNKNOWN_CREDIT = 0.3
_NOTHING = "No similar incidents found: no case shares a cause, shape, tag or wording with the probe."


@dataclass
class _Probe:
    causes: dict[CauseId, float] = field(default_factory=dict)
    signatures: list[tuple[CauseSignature, float]] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    category: str | None = None
    text: dict[str, float] = field(default_factory=dict)
    exclude: str | None = None
    related: set[int] = field(default_factory=set)
    derived: list[str] = field(default_factory=list)


def derive_spatial(location: Location | None) -> Spatial | None:
    """Spatial pattern implied by a location, or None when the location does not pin one down."""
    if location is None:
        return None
    if len(location.ranks) == 1 or (len(location.dp_ranks) == 1 and len(location.pp_ranks) == 1):
        return Spatial.SINGLE_WORKER
    if len(location.hosts) == 1:
        return Spatial.ONE_HOST
    if len(location.pp_ranks) == 1 and len(location.dp_ranks) > 1:
        return Spatial.ONE_STAGE
    return None


class _ShapeTable:
    """Per case and cause, the coded spatial/temporal/resource pattern of its signature (-1 = none)."""

    def __init__(self, index: SearchIndex) -> None:
        n, c = index.n, len(_CAUSES)
        self.codes = np.full((3, n, c), UNKNOWN, dtype=np.int8)
        for i, case in enumerate(index.cases):
            for sig in case.signature:
                j = _CAUSES.index(sig.cause)
                for k, code in enumerate(_pattern_codes(sig.pattern)):
                    if code is not None:
                        self.codes[k, i, j] = code
        self.tag_count = np.array([len(case.tags) for case in index.cases], dtype=np.float64)


# one shape table per index, dropped with it (a plain id() key could be reused by a later index)
_tables: weakref.WeakKeyDictionary[SearchIndex, _ShapeTable] = weakref.WeakKeyDictionary()
_tables_lock = threading.Lock()


def _table(index: SearchIndex) -> _ShapeTable:
    with _tables_lock:
        table = _tables.get(index)
        if table is None:
            table = _tables[index] = _ShapeTable(index)
        return table


def _pattern_codes(p: Pattern) -> tuple[int | None, int | None, int | None]:
    return (
        None if p.spatial is None else _SPATIAL.index(p.spatial),
        None if p.temporal is None else _TEMPORAL.index(p.temporal),
        None if p.resource is None else _RESOURCE.index(p.resource),
    )


def _closeness(values: list[Any], near: dict[frozenset[str], float]) -> np.ndarray:
    m = np.eye(len(values))
    for pair, value in near.items():
        a, b = (values.index(v) for v in pair)
        m[a, b] = m[b, a] = value
    return m


# Partial agreement between different pattern values: a single slow worker sits on one host, a
# sequence-length or GC pattern spread over random DP ranks is close to a job-wide one, GC pauses
# that grow are a kind of sporadic pause, and a cause with an onset persists once it has started.
# Everything else disagrees (0).
CLOSENESS: tuple[np.ndarray, np.ndarray, np.ndarray] = (
    _closeness(_SPATIAL, {frozenset({Spatial.SINGLE_WORKER, Spatial.ONE_HOST}): 0.6,
                          frozenset({Spatial.RANDOM_DP, Spatial.JOB_WIDE}): 0.4}),
    _closeness(_TEMPORAL, {frozenset({Temporal.SPORADIC, Temporal.GROWING}): 0.5,
                           frozenset({Temporal.ONSET, Temporal.PERSISTENT}): 0.5}),
    _closeness(_RESOURCE, {}),
)


def _field_agreement(k: int, codes: np.ndarray, value: int | None) -> np.ndarray:
    # an unknown field on either side earns partial credit, below an explicit agreement, so a case
    # recorded with the very same shape ranks above one whose shape is only partly known
    if value is None:
        return np.full(codes.shape, UNKNOWN_CREDIT)
    close = CLOSENESS[k][value][np.where(codes == UNKNOWN, 0, codes)]
    return np.where(codes == UNKNOWN, UNKNOWN_CREDIT, close)


def _shape_text(pattern: Pattern) -> str:
    parts = [p.value for p in (pattern.spatial, pattern.temporal, pattern.resource) if p is not None]
    return "/".join(parts) if parts else "unknown shape"


def similar_incidents(
    case_id: str | None = None,
    signatures: Sequence[CauseSignature] | None = None,
    text: str | None = None,
    limit: int = 5,
    offset: int = 0,
    *,
    library: Library | None = None,
) -> IncidentResults:
    """Cases most similar to a case, a diagnosis (its cause signatures) and/or a text.

    At least one of ``case_id``, ``signatures`` or ``text`` is required; given several, they are
    combined into one probe. The probe case itself is never returned. Each result carries the
    reasons that made it similar; see the module docstring for the scoring.
    """
    if case_id is None and not signatures and not (text and text.strip()):
        raise InvalidFilterError("similar_incidents needs a case_id, cause signatures or a text")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidFilterError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if offset < 0:
        raise InvalidFilterError(f"offset must be >= 0, got {offset}")
    lib = library or load_library()
    idx = lib.index
    probe = _Probe()
    if case_id is not None:
        src = lib.get(case_id)
        probe.exclude = src.id
        probe.causes.update(dict.fromkeys(src.causes, 1.0))
        probe.signatures.extend((s, 1.0) for s in src.signature)
        probe.tags = {t.casefold() for t in src.tags}
        probe.category = src.category
        probe.text = dict(idx.doc_vectors[idx.position[src.id]])
        probe.related = idx.linked.get(idx.position[src.id], set())
    for raw in signatures or ():
        sig = raw if isinstance(raw, CauseSignature) else CauseSignature.model_validate(raw)
        if sig.cause is CauseId.NONE:
            continue
        weight = 1.0 if sig.confidence is None else max(sig.confidence, 0.05)
        if sig.pattern.spatial is None:
            spatial = derive_spatial(sig.location)
            if spatial is not None:
                sig = sig.model_copy(update={"pattern": sig.pattern.model_copy(update={"spatial": spatial})})
                probe.derived.append(f"{sig.cause.value}: spatial {spatial.value} from location")
        probe.causes[sig.cause] = max(probe.causes.get(sig.cause, 0.0), weight)
        probe.signatures.append((sig, weight))
    if text and text.strip():
        for tok, w in idx.text_vector(text).items():
            probe.text[tok] = probe.text.get(tok, 0.0) + w
        # synonyms in the text name causes too ("garbage collection" -> gc-pause)
        for term in idx.parse(text):
            for target in term.targets:
                if target.startswith("cause:"):
                    cause = CauseId(target.split(":", 1)[1])
                    probe.causes.setdefault(cause, 0.5)

    parts: dict[str, np.ndarray] = {}
    if probe.causes:
        weights = np.zeros(len(_CAUSES))
        for c, w in probe.causes.items():
            weights[_CAUSES.index(c)] = w
        inter = idx.cause_matrix.astype(np.float64) @ weights
        shared = idx.cause_matrix[:, weights > 0].sum(axis=1)
        union = idx.cause_matrix.sum(axis=1) + len(probe.causes) - shared
        recall = inter / weights.sum()
        parts["causes"] = 0.5 * (recall + inter / np.maximum(union, 1))
    table = _table(idx)
    if probe.signatures:
        acc = np.zeros(idx.n)
        total_w = 0.0
        for sig, w in probe.signatures:
            j = _CAUSES.index(sig.cause)
            has = idx.cause_matrix[:, j].astype(np.float64)
            codes = _pattern_codes(sig.pattern)
            agree = sum(_field_agreement(k, table.codes[k, :, j], code) for k, code in enumerate(codes)) / 3.0
            acc += w * has * agree
            total_w += w
        parts["shape"] = acc / total_w
    if probe.tags:
        counts = np.zeros(idx.n)
        for tag in probe.tags:
            post = idx.postings.get(f"tag:{tag}")
            if post is not None:
                counts[post.cases] += 1
        parts["tags"] = counts / np.maximum(table.tag_count + len(probe.tags) - counts, 1)
    if probe.text:
        parts["text"] = np.clip(idx.text_similarity(probe.text), 0.0, 1.0)
    if probe.category is not None:
        parts["category"] = (idx.category_idx == CATEGORIES.index(probe.category)).astype(np.float64)

    if not parts:  # e.g. a text made only of words the library never uses
        return IncidentResults(total=0, results=[], next_offset=None, message=_NOTHING)
    total_weight = sum(WEIGHTS[k] for k in parts)
    combined = sum((WEIGHTS[k] * v for k, v in parts.items()), np.zeros(idx.n)) / total_weight
    related_mask = None
    if probe.related:
        related_mask = np.zeros(idx.n, dtype=bool)
        related_mask[list(probe.related)] = True
        combined = combined + RELATED_BONUS * related_mask
    scores = np.clip(combined, 0.0, 1.0) * 100.0
    if probe.exclude is not None:
        scores[idx.position[probe.exclude]] = 0.0
    hits = np.flatnonzero(scores >= MIN_SIMILARITY)
    order = sorted(hits.tolist(), key=lambda i: (-round(float(scores[i]), 1), i))

    def hit(i: int) -> IncidentHit:
        case = idx.cases[i]
        return _hit(case, float(scores[i]), _reasons(case, i, probe, parts, related_mask), sorted(parts))

    return _paged(order, offset, limit, hit, _NOTHING, "match")


def _reasons(case: Case, i: int, probe: _Probe, parts: dict[str, np.ndarray],
             related_mask: np.ndarray | None) -> list[str]:
    reasons: list[str] = []
    shared = [c.value for c in case.causes if c in probe.causes]
    if shared:
        reasons.append(f"shares cause {', '.join(shared)}")
    for sig, _ in probe.signatures:
        for own in case.signature:
            if own.cause != sig.cause:
                continue
            same, near = [], []
            for k, (a, b) in enumerate(zip(_pattern_codes(sig.pattern), _pattern_codes(own.pattern),
                                           strict=True)):
                if a is None or b is None:
                    continue
                values = (_SPATIAL, _TEMPORAL, _RESOURCE)[k]
                if a == b:
                    same.append(values[a].value)
                elif CLOSENESS[k][a, b] > 0:
                    near.append(f"{values[a].value} ~ {values[b].value}")
            if same:
                reasons.append(f"same {sig.cause.value} shape: {'/'.join(same)} "
                               f"(case: {_shape_text(own.pattern)})")
            if near:
                reasons.append(f"close {sig.cause.value} shape: {', '.join(near)}")
            break
    if probe.tags:
        common = sorted(probe.tags & {t.casefold() for t in case.tags})
        if common:
            reasons.append(f"shares tags {', '.join(common[:5])}")
    if "text" in parts and parts["text"][i] >= 0.1:
        reasons.append(f"similar wording (cosine {parts['text'][i]:.2f})")
    if "category" in parts and parts["category"][i] > 0:
        reasons.append(f"same category {case.category}")
    if related_mask is not None and related_mask[i]:
        reasons.append("listed as a related case")
    reasons.extend(probe.derived)
    return reasons
