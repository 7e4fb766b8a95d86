"""The in-memory search index over a list of cases.

Built once per library (``Library.index``). It holds:

- an inverted index from normalised tokens to the cases and fields that contain them, with each
  field's weight (title and aliases 3, tags 2.5, causes and organisation 2, topics and slug 1.5,
  body 1), so a title hit counts three times a body hit;
- a sorted vocabulary for typo tolerance: a query word of 4+ characters matches vocabulary words
  with ``rapidfuzz.fuzz.ratio`` >= 80-85 (weighted by the squared ratio), and a prefix of 4+
  characters (2+ for Hangul) matches the words it starts; numbers and short words match exactly;
- concept tokens (``cause:<id>``, ``tag:<tag>``, ``topic:<name>``) that the query synonyms of
  ``incidents.synonyms`` resolve to;
- tf-idf vectors of each case's whole text (as postings) for ``incidents.similar``;
- numpy arrays for the filters (category, causes, year range).

All per-query work is vectorised over cases with numpy (``np.maximum.at`` / ``np.bincount``); the
per-token candidate lookups are cached.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from rapidfuzz import fuzz, process, utils

from diagnosers.vocab import CauseId
from incidents.schema import CATEGORIES, Case
from incidents.synonyms import SYNONYMS

FIELDS: tuple[str, ...] = ("title", "aliases", "tags", "causes", "organization", "topics", "slug", "body")
FIELD_WEIGHTS: dict[str, float] = {
    "title": 3.0, "aliases": 3.0, "tags": 2.5, "causes": 2.0, "organization": 2.0, "topics": 1.5,
    "slug": 1.5, "body": 1.0,
}
MAX_WEIGHT = max(FIELD_WEIGHTS.values())
FIELD_BIT = {name: 1 << i for i, name in enumerate(FIELDS)}

STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "had", "has",
    "have", "how", "if", "in", "into", "is", "it", "its", "of", "on", "or", "per", "than", "that", "the",
    "their", "this", "to", "was", "were", "what", "when", "where", "which", "who", "why", "with",
})
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TOKEN_RE = re.compile(r"\d+(?:\.\d+)+|[^\W_]+")

# Similarity a concept (synonym) match gives a case that carries one of its targets: about a hit in
# the causes/tags fields, and below the phrase's own words in a title or tags, so a case that names
# the phrase outright ("lemon node") ranks above cases that only share the mapped cause.
CONCEPT_SIMILARITY = 0.75
_CASE_ID_RE = re.compile(r"\bIL-(\d{4})\b", re.IGNORECASE)
PREFIX_SIMILARITY = 0.85


def tokenize(text: str) -> list[str]:
    """Lower-case words and numbers of ``text``; '10,000' -> '10000', '42.5%' -> '42.5'.

    Underscores and dashes split words (``CUDA_DEVICE_MAX_CONNECTIONS`` gives four tokens); stop
    words and single ASCII letters are dropped.
    """
    text = _THOUSANDS_RE.sub("", text.casefold())
    return [
        t for t in _TOKEN_RE.findall(text)
        if t not in STOPWORDS and not (len(t) == 1 and t.isascii() and t.isalpha())
    ]


def _is_number(token: str) -> bool:
    return token[0].isdigit()


def case_body(case: Case) -> str:
    """All narrative text of a case, joined (the ``body`` field of the index)."""
    parts: list[str] = [case.summary, *case.symptoms, *case.cause_notes, *case.detection,
                        *case.follow_ups, *case.lessons]
    if case.trigger:
        parts.append(case.trigger)
    for m in case.mitigations:
        parts.append(m.action)
        if m.effect:
            parts.append(m.effect)
    imp = case.impact
    parts.extend(x for x in (imp.scope, imp.affected_users, imp.region) if x)
    return "\n".join(parts)


def case_fields(case: Case) -> dict[str, str]:
    """The searchable text of each field of a case."""
    return {
        "title": case.title,
        "aliases": "\n".join(case.aliases),
        "tags": " ".join(case.tags),
        "causes": " ".join([*(c.value for c in case.causes), case.category]),
        "organization": case.organization,
        "topics": " ".join(case.topics),
        "slug": f"{case.id} {case.slug}",
        "body": case_body(case),
    }


def concept_tokens(case: Case) -> list[tuple[str, str]]:
    """(concept token, field) pairs of a case: its causes, category, tags and topics."""
    out = [(f"id:{case.id.lower()}", "slug")]
    out.extend((f"cause:{c.value}", "causes") for c in case.causes)
    out.append((f"category:{case.category}", "causes"))
    out.extend((f"tag:{t.casefold()}", "tags") for t in case.tags)
    out.extend((f"topic:{t}", "topics") for t in case.topics)
    return out


@dataclass
class Posting:
    """Cases containing one token (sorted indices), their best field weight and a field bitmask."""

    cases: np.ndarray
    weights: np.ndarray
    masks: np.ndarray

    def lookup(self, i: int) -> tuple[float, int] | None:
        """(weight, field mask) of case ``i``, or None when the token is not in that case."""
        k = int(np.searchsorted(self.cases, i))
        if k < len(self.cases) and self.cases[k] == i:
            return float(self.weights[k]), int(self.masks[k])
        return None


@dataclass
class Term:
    """One unit of a query: a word, or a synonym phrase resolved to concept targets."""

    text: str
    tokens: tuple[str, ...]
    targets: tuple[str, ...] = ()
    concept_similarity: float = CONCEPT_SIMILARITY
    # (vocabulary token, similarity) pairs per query token
    candidates: tuple[tuple[tuple[str, float], ...], ...] = ()
    idf: float = 0.0


@dataclass
class Scored:
    """The per-case outcome of scoring one query."""

    scores: np.ndarray  # 0..100 per case
    terms: list[Term]


class SearchIndex:
    """Index of a fixed list of cases; see the module docstring."""

    def __init__(self, cases: list[Case]) -> None:
        self.cases = cases
        self.n = len(cases)
        self.position = {c.id: i for i, c in enumerate(cases)}
        raw: dict[str, dict[int, list[float]]] = defaultdict(dict)  # token -> case -> [weight, mask]
        doc_tf: list[dict[str, int]] = []
        for i, case in enumerate(cases):
            fields = case_fields(case)
            tf: dict[str, int] = defaultdict(int)
            for name, text in fields.items():
                w, bit = FIELD_WEIGHTS[name], FIELD_BIT[name]
                for tok in tokenize(text):
                    if name == "body":
                        tf[tok] += 1
                    else:
                        tf[tok] += 2  # headline fields weigh more in the similarity vector too
                    slot = raw[tok].get(i)
                    if slot is None:
                        raw[tok][i] = [w, bit]
                    else:
                        slot[0] = max(slot[0], w)
                        slot[1] = int(slot[1]) | bit
            for tok, name in concept_tokens(case):
                raw[tok][i] = [FIELD_WEIGHTS[name], FIELD_BIT[name]]
            doc_tf.append(tf)

        self.postings: dict[str, Posting] = {}
        for tok, per_case in raw.items():
            idx = np.fromiter(per_case.keys(), dtype=np.int32, count=len(per_case))
            vals = np.array(list(per_case.values()), dtype=np.float64).reshape(-1, 2)
            # cases were visited in order, so each posting's case indices are already sorted
            self.postings[tok] = Posting(
                cases=idx, weights=vals[:, 0].astype(np.float32), masks=vals[:, 1].astype(np.int32),
            )
        self.vocab = sorted(t for t in self.postings if ":" not in t and not _is_number(t))
        self._vocab_set = frozenset(self.postings)

        self._idf = {tok: math.log(1.0 + self.n / len(p.cases)) for tok, p in self.postings.items()}
        self._idf_unseen = math.log(1.0 + self.n / 0.5)

        # tf-idf vectors (unit length) per case, and as postings for text similarity
        self.tfidf: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.doc_vectors: list[dict[str, float]] = []
        cols: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
        idf, log = self._idf, math.log
        for i, tf in enumerate(doc_tf):
            vec = {tok: (1.0 + log(count)) * idf[tok] for tok, count in tf.items()}
            norm = math.sqrt(sum(w * w for w in vec.values())) or 1.0
            for tok in vec:
                vec[tok] /= norm
                col = cols[tok]
                col[0].append(i)
                col[1].append(vec[tok])
            self.doc_vectors.append(vec)
        for tok, (ix, ws) in cols.items():
            self.tfidf[tok] = (np.array(ix, dtype=np.int32), np.array(ws))

        # filter arrays
        self.category_idx = np.array([CATEGORIES.index(c.category) for c in cases], dtype=np.int16)
        causes = list(CauseId)
        self.cause_matrix = np.zeros((self.n, len(causes)), dtype=bool)
        for i, case in enumerate(cases):
            for c in case.causes:
                self.cause_matrix[i, causes.index(c)] = True
        self.year_first = np.array([c.year for c in cases], dtype=np.int32)
        self.year_last = np.array([c.last_year for c in cases], dtype=np.int32)
        self.org_text = [utils.default_process(c.organization) for c in cases]
        self.headline = [utils.default_process(" ".join([c.title, *c.aliases])) for c in cases]
        self.dates = [c.date for c in cases]
        self._candidates = lru_cache(maxsize=4096)(self._candidates_uncached)
        self._concept_cache: dict[tuple[str, ...], np.ndarray] = {}
        # vocabulary by word length: fuzz.ratio >= 80 needs the shorter word to be at least 2/3
        # of the longer one, so a query word is only compared with words of similar length
        self._pools: dict[int, list[str]] = {}
        self._by_length: dict[int, list[str]] = defaultdict(list)
        for tok in self.vocab:
            self._by_length[len(tok)].append(tok)
        # curated links in both directions: a case is related to those it lists and those listing it
        self.linked: dict[int, set[int]] = defaultdict(set)
        for i, case in enumerate(cases):
            for rel in case.related:
                j = self.position.get(rel)
                if j is not None:
                    self.linked[i].add(j)
                    self.linked[j].add(i)
        # sort keys: newer first, then id order
        self.date_key = np.array([_date_ordinal(c.date) for c in cases], dtype=np.int64)

    # --- statistics ------------------------------------------------------------------------------

    def df(self, token: str) -> int:
        p = self.postings.get(token)
        return 0 if p is None else len(p.cases)

    def idf(self, token: str) -> float:
        """Smoothed inverse document frequency log(1 + N/df); an unseen token gets the largest value."""
        return self._idf.get(token, self._idf_unseen)

    # --- query parsing ---------------------------------------------------------------------------

    def _candidates_uncached(self, q: str) -> tuple[tuple[str, float], ...]:
        """Vocabulary tokens a query token may stand for, with their similarity in (0, 1]."""
        found: dict[str, float] = {}
        if q in self._vocab_set:
            found[q] = 1.0
        if _is_number(q):
            return tuple(found.items())
        hangul = not q.isascii()
        if len(q) >= 4 or (hangul and len(q) >= 2):
            lo = bisect.bisect_left(self.vocab, q)
            for tok in self.vocab[lo: lo + 50]:
                if not tok.startswith(q):
                    break
                if tok != q:
                    found[tok] = max(found.get(tok, 0.0), PREFIX_SIMILARITY)
        if len(q) >= 4 or (hangul and len(q) >= 3):
            cutoff = 80.0 if len(q) >= 6 else 85.0
            pool = self._pool(len(q))
            for tok, ratio, _ in process.extract(q, pool, scorer=fuzz.ratio, score_cutoff=cutoff, limit=12):
                if tok != q:
                    found[tok] = max(found.get(tok, 0.0), (ratio / 100.0) ** 2)
        return tuple(sorted(found.items(), key=lambda kv: -kv[1]))

    def _pool(self, length: int) -> list[str]:
        """Vocabulary words whose length allows fuzz.ratio >= 80 with a word of ``length``."""
        pool = self._pools.get(length)
        if pool is None:
            lo, hi = math.ceil(2 * length / 3), (3 * length) // 2
            pool = self._pools[length] = [t for n in range(lo, hi + 1) for t in self._by_length.get(n, ())]
        return pool

    def parse(self, query: str) -> list[Term]:
        """Split a query into terms; case ids and synonym phrases (longest first, typo-tolerant)
        become concepts."""
        terms: list[Term] = [
            Term(text=f"IL-{num}", tokens=(num,), targets=(f"id:il-{num}",), concept_similarity=1.0)
            for num in _CASE_ID_RE.findall(query)
        ]
        toks = tokenize(_CASE_ID_RE.sub(" ", query))
        i = 0
        while i < len(toks):
            hit = self._phrase_at(toks, i)
            if hit is not None:
                phrase, n_tok = hit
                span = tuple(toks[i: i + n_tok])
                terms.append(Term(text=phrase, tokens=span, targets=SYNONYMS[phrase]))
                i += n_tok
                continue
            terms.append(Term(text=toks[i], tokens=(toks[i],)))
            i += 1
        # merge repeated terms, then attach candidates and idf
        unique: dict[tuple[str, ...], Term] = {}
        for t in terms:
            unique.setdefault(t.tokens, t)
        out = []
        for t in unique.values():
            t.candidates = tuple(self._candidates(tok) for tok in t.tokens)
            token_idfs = []
            for tok, cands in zip(t.tokens, t.candidates, strict=True):
                token_idfs.append(self.idf(cands[0][0]) if cands else self.idf(tok))
            if t.targets:
                df = int(self._concept_mask(t.targets).sum())
                token_idfs.append(math.log(1.0 + self.n / max(df, 0.5)))
                t.idf = max(token_idfs)
            else:
                t.idf = token_idfs[0]
            out.append(t)
        return out

    def _phrase_at(self, toks: list[str], i: int) -> tuple[str, int] | None:
        best: tuple[str, int] | None = None
        for phrase, words in _PHRASES:
            n = len(words)
            if n > len(toks) - i or (best is not None and n <= best[1]):
                continue
            if all(_word_matches(toks[i + k], words[k]) for k in range(n)):
                best = (phrase, n)
        return best

    def _concept_mask(self, targets: tuple[str, ...]) -> np.ndarray:
        cached = self._concept_cache.get(targets)
        if cached is not None:
            return cached
        mask = np.zeros(self.n, dtype=bool)
        for target in targets:
            p = self.postings.get(target)
            if p is not None:
                mask[p.cases] = True
        mask.flags.writeable = False
        self._concept_cache[targets] = mask
        return mask

    # --- scoring ---------------------------------------------------------------------------------

    def _token_scores(self, cands: tuple[tuple[str, float], ...]) -> np.ndarray:
        best = np.zeros(self.n, dtype=np.float32)
        for tok, sim in cands:
            p = self.postings[tok]
            # a posting lists each case once, so plain fancy indexing is exact (and far faster
            # than np.maximum.at)
            best[p.cases] = np.maximum(best[p.cases], p.weights * (sim / MAX_WEIGHT))
        return best

    def score(self, query: str, allowed: np.ndarray | None = None, *, need: int = 10,
              floor: float = 0.0) -> Scored:
        """Score every case for ``query``: 0..100 = 100 x coverage x (0.85 + 0.15 x headline fit).

        Coverage of a term is the best (similarity x field weight / 3) over its matching tokens; a
        synonym term takes the larger of its words' coverage and 0.9 when the case carries one of its
        targets. The headline fit is ``fuzz.token_set_ratio`` of the query against title + aliases,
        computed only for cases with some coverage.
        """
        terms = self.parse(query)
        cover = np.zeros(self.n, dtype=np.float64)
        total_idf = 0.0
        for term in terms:
            per_tok = [self._token_scores(c) for c in term.candidates]
            s = np.mean(per_tok, axis=0) if len(per_tok) > 1 else per_tok[0]
            if term.targets:
                s = np.maximum(s, self._concept_mask(term.targets) * term.concept_similarity)
            cover += term.idf * s
            total_idf += term.idf
        if total_idf > 0:
            cover /= total_idf
        if allowed is not None:
            cover = np.where(allowed, cover, 0.0)
        scores = 85.0 * cover
        # The headline fit can raise a score from 85c to at most 100c. It is computed only where
        # that can change the outcome: cases that could reach the top ``need`` (their 100c is at
        # least the need-th best lower bound 85c) and cases near the ``floor`` cut-off.
        live = np.flatnonzero(cover > 0)
        if live.size > need:
            kth = np.partition(scores[live], live.size - need)[live.size - need]
            upper = 100.0 * cover[live]
            live = live[(upper >= kth) | ((upper >= floor) & (scores[live] < floor))]
        if live.size:
            q = utils.default_process(query)
            fit = process.cdist([q], [self.headline[i] for i in live], scorer=fuzz.token_set_ratio,
                                dtype=np.float32)[0]
            # the headline fit scales the coverage, so it can lift a real match but not a stray one
            scores[live] += 0.15 * fit * cover[live]
        return Scored(scores=scores, terms=terms)

    def explain(self, i: int, terms: list[Term]) -> tuple[list[str], list[str]]:
        """Reasons and matched field names for case ``i`` under ``terms``."""
        reasons: list[str] = []
        fields_mask = 0
        for term in terms:
            if term.targets:
                for target in term.targets:
                    p = self.postings.get(target)
                    found = None if p is None else p.lookup(i)
                    if found is not None:
                        if target.startswith("id:"):
                            reasons.append(f"'{term.text}' is the case id")
                        else:
                            reasons.append(f"'{term.text}' means {target.replace(':', ' ', 1)}")
                        fields_mask |= found[1]
                        break
            for tok_text, cands in zip(term.tokens, term.candidates, strict=True):
                best: tuple[float, str, int] | None = None
                for tok, sim in cands:
                    hit = self.postings[tok].lookup(i)
                    if hit is not None:
                        value = sim * hit[0]
                        if best is None or value > best[0]:
                            best = (value, tok, hit[1])
                if best is None:
                    continue
                _, tok, mask = best
                fields_mask |= mask
                where = ", ".join(f for f in FIELDS if mask & FIELD_BIT[f])
                if tok == tok_text:
                    reasons.append(f"'{tok}' in {where}")
                else:
                    reasons.append(f"'{tok_text}' ~ '{tok}' in {where}")
        return reasons, [f for f in FIELDS if fields_mask & FIELD_BIT[f]]

    # --- text similarity -------------------------------------------------------------------------

    def text_similarity(self, vector: dict[str, float]) -> np.ndarray:
        """Cosine similarity of a tf-idf ``vector`` (token -> weight, any scale) with every case."""
        norm = math.sqrt(sum(w * w for w in vector.values())) or 1.0
        idx_parts, w_parts = [], []
        for tok, w in vector.items():
            col = self.tfidf.get(tok)
            if col is not None:
                idx_parts.append(col[0])
                w_parts.append(col[1] * (w / norm))
        if not idx_parts:
            return np.zeros(self.n)
        return np.bincount(np.concatenate(idx_parts), weights=np.concatenate(w_parts), minlength=self.n)

    def text_vector(self, text: str) -> dict[str, float]:
        """tf-idf vector of free text, over the library's vocabulary (typos resolved)."""
        counts: dict[str, float] = defaultdict(float)
        for tok in tokenize(text):
            cands = self._candidates(tok)
            if cands:
                best, sim = cands[0]
                counts[best] += sim
        return {tok: (1.0 + math.log(max(c, 1.0))) * self.idf(tok) for tok, c in counts.items()}


def _date_ordinal(date: str) -> int:
    """YYYY[-MM[-DD]] (first date of a range) as an int that sorts chronologically."""
    parts = [int(x) for x in date.split(" ")[0].split("-")]
    year, month, day = (*parts, 0, 0)[:3]
    return year * 10000 + month * 100 + day


def _word_matches(query_tok: str, phrase_tok: str) -> bool:
    if query_tok == phrase_tok:
        return True
    if len(phrase_tok) < 5 or _is_number(phrase_tok):
        return False
    return fuzz.ratio(query_tok, phrase_tok) >= 85


_PHRASES: list[tuple[str, tuple[str, ...]]] = sorted(
    ((p, tuple(tokenize(p))) for p in SYNONYMS), key=lambda pw: -len(pw[1])
)
