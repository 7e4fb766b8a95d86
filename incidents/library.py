"""Load, validate and index the incident library.

``load_library()`` reads the packaged cases (``incidents/cases/IL-NNNN.yaml``) and topics
(``incidents/topics.yaml``) once and caches the result; ``Library.from_directory(path)`` reads any
other directory with the same layout (the benchmark writes 10,000 generated cases). Every case is
validated by ``incidents.schema.Case``; cross-references are then checked across the whole set: file
name equals id, ids and slugs are unique, related cases exist, topics exist.

Loading also builds the search index used by ``incidents.search`` and ``incidents.similar``
(``incidents.index.SearchIndex``), lazily on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from incidents.schema import Case, CaseFileError, Topic, UnknownIncidentError, UnknownTopicError

if TYPE_CHECKING:
    from incidents.index import SearchIndex

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_CASES_DIR = PACKAGE_DIR / "cases"
DEFAULT_TOPICS_FILE = PACKAGE_DIR / "topics.yaml"

# libyaml's C loader is ~10x faster than the pure-Python one; both give the same safe result.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_Loader)  # a safe loader (CSafeLoader or SafeLoader)
    except yaml.YAMLError as exc:
        raise CaseFileError(f"invalid YAML: {exc}", file=str(path)) from exc


def _format_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(case)"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def parse_case(data: Any, *, file: str | None = None) -> Case:
    """Validate one case mapping (as read from YAML); errors name the file and the field."""
    if not isinstance(data, dict):
        raise CaseFileError("a case file must hold one mapping", file=file)
    try:
        return Case.model_validate(data)
    except ValidationError as exc:
        raise CaseFileError(_format_validation(exc), file=file) from exc


def load_topics(path: Path) -> dict[str, Topic]:
    """Read a topics file: a YAML list of ``{name, title, description}``."""
    data = _read_yaml(path)
    if not isinstance(data, list):
        raise CaseFileError("the topics file must hold a list of topics", file=str(path))
    topics: dict[str, Topic] = {}
    for i, item in enumerate(data):
        try:
            topic = Topic.model_validate(item)
        except ValidationError as exc:
            raise CaseFileError(f"topic #{i}: {_format_validation(exc)}", file=str(path)) from exc
        if topic.name in topics:
            raise CaseFileError(f"topic {topic.name!r} is defined twice", file=str(path))
        topics[topic.name] = topic
    return topics


class Library:
    """A validated, cross-checked set of cases and topics; cases keep their id order."""

    def __init__(self, cases: Iterable[Case], topics: dict[str, Topic], *, origin: str = "<memory>") -> None:
        self.origin = origin
        self.topics = dict(topics)
        self.cases: dict[str, Case] = {}
        self._by_slug: dict[str, str] = {}
        for case in sorted(cases, key=lambda c: c.id):
            if case.id in self.cases:
                raise CaseFileError(f"case id {case.id} appears twice", file=origin)
            if case.slug in self._by_slug:
                raise CaseFileError(
                    f"slug {case.slug!r} is used by {self._by_slug[case.slug]} and {case.id}", file=origin
                )
            self.cases[case.id] = case
            self._by_slug[case.slug] = case.id
        self._check_references()
        self._index_lock = threading.Lock()

    def _check_references(self) -> None:
        problems = []
        for case in self.cases.values():
            for rel in case.related:
                if rel not in self.cases:
                    problems.append(f"{case.id}: related case {rel} does not exist")
            for topic in case.topics:
                if topic not in self.topics:
                    problems.append(f"{case.id}: topic {topic!r} is not defined in the topics file")
        if problems:
            raise CaseFileError("; ".join(problems), file=self.origin)

    @classmethod
    def from_directory(cls, cases_dir: str | Path, topics_file: str | Path | None = None) -> Library:
        """Load every ``IL-*.yaml`` under ``cases_dir`` and the topics file.

        ``topics_file`` defaults to ``topics.yaml`` next to ``cases_dir``, then the packaged one.
        """
        cases_path = Path(cases_dir)
        if not cases_path.is_dir():
            raise FileNotFoundError(f"incident cases directory not found: {cases_path}")
        if topics_file is None:
            sibling = cases_path.parent / "topics.yaml"
            topics_file = sibling if sibling.is_file() else DEFAULT_TOPICS_FILE
        topics = load_topics(Path(topics_file))
        cases = []
        for path in sorted(cases_path.glob("IL-*.yaml")):
            case = parse_case(_read_yaml(path), file=str(path))
            if case.id != path.stem:
                raise CaseFileError(
                    f"file name says {path.stem} but the case id is {case.id}", file=str(path)
                )
            cases.append(case)
        if not cases:
            raise CaseFileError("no IL-*.yaml case files found", file=str(cases_path))
        return cls(cases, topics, origin=str(cases_path))

    # --- lookups ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.cases)

    def get(self, case_id: str) -> Case:
        """The case with this id (``IL-0417``, case-insensitive) or fact-sheet slug."""
        key = case_id.strip()
        found = self.cases.get(key.upper()) or self.cases.get(self._by_slug.get(key.lower(), ""))
        if found is None:
            raise UnknownIncidentError(
                f"unknown incident id {case_id!r}: the library holds {len(self.cases)} cases "
                f"({self._id_range()}); ids look like IL-0417"
            )
        return found

    def topic(self, name: str) -> Topic:
        """The topic with this name, or UnknownTopicError listing the known names."""
        found = self.topics.get(name.strip().lower())
        if found is None:
            raise UnknownTopicError(f"unknown topic {name!r}; known topics: {', '.join(sorted(self.topics))}")
        return found

    def _id_range(self) -> str:
        ids = list(self.cases)
        return f"{ids[0]} .. {ids[-1]}" if ids else "none"

    @cached_property
    def _index(self) -> SearchIndex:
        from incidents.index import SearchIndex

        return SearchIndex(list(self.cases.values()))

    @property
    def index(self) -> SearchIndex:
        """The search index, built on first use (thread-safe)."""
        with self._index_lock:
            return self._index


_default: Library | None = None
_default_lock = threading.Lock()


def load_library(path: str | Path | None = None) -> Library:
    """The packaged library (cached after the first call), or a fresh load of ``path``."""
    global _default
    if path is not None:
        return Library.from_directory(path)
    with _default_lock:
        if _default is None:
            _default = Library.from_directory(DEFAULT_CASES_DIR, DEFAULT_TOPICS_FILE)
        return _default
