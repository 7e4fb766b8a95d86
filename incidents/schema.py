"""The incident case schema, the topic schema and the library's error types.

A case is one human-editable YAML file (``incidents/cases/IL-NNNN.yaml``). Its sections follow the
seed case IL-0417 (summary, fact box, symptoms, causes with trigger, detection, mitigations with their
measured effect, follow-ups, lessons, sources, related cases) and add the machine fields our search
and similarity need: ``category`` (the fact sheet's broad category), ``causes`` (ids of
``diagnosers.vocab.CauseId``), ``tags``, ``topics`` and a ``signature`` in the vocabulary's terms.

Facts that could not be confirmed from a primary source keep a visible ``(unverified)`` marker in
their sentence; ``date_unverified`` flags a date of that kind.
"""

from __future__ import annotations

import re
from datetime import date as _date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diagnosers.signature import CauseSignature
from diagnosers.vocab import CATEGORY_TO_CAUSES, CauseId

CASE_ID_RE = re.compile(r"^IL-\d{4}$")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Accepted date forms: 2025, 2025-05, 2025-05-12, or a range "2020-04 to 2024-04".
_ONE_DATE = r"\d{4}(?:-\d{2}(?:-\d{2})?)?"
DATE_RE = re.compile(rf"^{_ONE_DATE}(?: to {_ONE_DATE})?$")

CATEGORIES: tuple[str, ...] = tuple(CATEGORY_TO_CAUSES)
# Categories whose cause mapping holds only "when one host is slow" (the mapping rule): a
# job-wide thermal swing or CPU contention on every host is not a faulty machine, so for these the
# mapped causes are allowed but not required.
CONDITIONAL_CATEGORIES: frozenset[str] = frozenset({"thermal-or-power-throttling", "host-cpu-contention"})

SourceType = Literal[
    "paper", "blog", "issue", "pull-request", "repository", "docs", "talk", "summary", "status-page",
    "logbook", "news",
]
Severity = Literal["low", "medium", "high", "critical"]
DateKind = Literal["publication", "event", "period"]


# --- errors --------------------------------------------------------------------------------------


class IncidentLibraryError(Exception):
    """Base class of the incident library's errors."""


class CaseFileError(IncidentLibraryError, ValueError):
    """A case or topic file is malformed; the message names the file and the field."""

    def __init__(self, message: str, *, file: str | None = None) -> None:
        self.file = file
        super().__init__(f"{file}: {message}" if file else message)


class UnknownIncidentError(IncidentLibraryError, LookupError):
    """An incident id that the library does not hold."""

    def __str__(self) -> str:  # LookupError's str() would quote the message like a dict key
        return str(self.args[0]) if self.args else ""


class UnknownTopicError(IncidentLibraryError, LookupError):
    """A topic name that the library does not define."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidFilterError(IncidentLibraryError, ValueError):
    """A search or list filter with a value outside the vocabulary or range."""


# --- case model ----------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Source(_Strict):
    """Where a case's facts come from."""

    url: str
    type: SourceType
    archived: str | None = Field(default=None, description="URL of an archived copy, when one exists")

    @field_validator("url", "archived")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+\.[^\s]+$", value):
            raise ValueError(f"not an http(s) URL: {value!r}")
        return value


class Impact(_Strict):
    """The fact box: free-text scope plus the numbers that can be compared across cases."""

    scope: str | None = None
    affected_users: str | None = None
    severity: Severity | None = None
    region: str | None = None
    time_to_detect: str | None = None
    time_to_recover: str | None = None
    scale_gpus: int | None = Field(default=None, ge=1, description="GPUs or accelerators involved")
    slowdown_pct: float | None = Field(default=None, ge=0, description="headline slowdown or loss, percent")


class Mitigation(_Strict):
    """One action taken, with its measured effect when one was reported."""

    action: str
    effect: str | None = None


class CaseSignature(CauseSignature):
    """A cause with the shape it had in this case (vocabulary terms), plus an optional note.

    The shape may be ``temporal: onset`` (a cause that started during the run), with
    ``onset_step`` when the report names the step, e.g. ``{temporal: onset, onset_step: 1200}``.
    """

    note: str | None = None


class Case(_Strict):
    """One incident case; see the module docstring for the section meanings."""

    id: str
    slug: str = Field(description="the fact sheet's record id this case was written from")
    title: str = Field(min_length=10)
    aliases: list[str] = Field(default_factory=list, description="other titles, e.g. the original Korean one")
    organization: str
    date: str
    date_kind: DateKind = "publication"
    date_unverified: bool = False
    domain: str = "ai-infra"
    summary: str = Field(min_length=40)
    impact: Impact = Field(default_factory=Impact)
    symptoms: list[str] = Field(default_factory=list)
    category: str
    causes: list[CauseId] = Field(default_factory=list)
    cause_notes: list[str] = Field(default_factory=list)
    trigger: str | None = None
    detection: list[str] = Field(default_factory=list)
    mitigations: list[Mitigation] = Field(default_factory=list)
    follow_ups: list[str] = Field(default_factory=list)
    lessons: list[str] = Field(default_factory=list)
    sources: list[Source] = Field(min_length=1)
    related: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    topics: list[str] = Field(default_factory=list)
    signature: list[CaseSignature] = Field(default_factory=list)

    @field_validator("date", mode="before")
    @classmethod
    def _date_text(cls, value: object) -> object:
        # YAML turns an unquoted 2025-05-12 into a date object; keep the text form throughout.
        if isinstance(value, _date):
            return value.isoformat()
        if isinstance(value, int):
            return str(value)
        return value

    @field_validator("id")
    @classmethod
    def _id_form(cls, value: str) -> str:
        if not CASE_ID_RE.match(value):
            raise ValueError(f"id must look like IL-0417, got {value!r}")
        return value

    @field_validator("slug")
    @classmethod
    def _slug_form(cls, value: str) -> str:
        if not SLUG_RE.match(value):
            raise ValueError(f"slug must be lower-case letters, digits and dashes, got {value!r}")
        return value

    @field_validator("date")
    @classmethod
    def _date_form(cls, value: str) -> str:
        if not DATE_RE.match(value):
            raise ValueError(f"date must be YYYY, YYYY-MM, YYYY-MM-DD or 'A to B', got {value!r}")
        return value

    @field_validator("category")
    @classmethod
    def _known_category(cls, value: str) -> str:
        if value not in CATEGORY_TO_CAUSES:
            raise ValueError(f"unknown category {value!r}; expected one of {', '.join(CATEGORIES)}")
        return value

    @field_validator("tags")
    @classmethod
    def _tag_form(cls, value: list[str]) -> list[str]:
        for tag in value:
            if not TAG_RE.match(tag):
                raise ValueError(f"tag {tag!r} must be a slug (letters, digits, '.', '_', '-')")
        if len(set(value)) != len(value):
            raise ValueError("tags repeat")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        if CauseId.NONE in self.causes:
            raise ValueError("a case cannot carry the cause 'none'")
        if len(set(self.causes)) != len(self.causes):
            raise ValueError("causes repeat")
        required = set(CATEGORY_TO_CAUSES[self.category])
        if self.category in CONDITIONAL_CATEGORIES:
            required = set()
        missing = required - set(self.causes)
        if missing:
            raise ValueError(
                f"category {self.category!r} maps to {sorted(c.value for c in required)}, "
                f"but causes lack {sorted(c.value for c in missing)}"
            )
        for entry in self.signature:
            if entry.cause not in self.causes:
                raise ValueError(f"signature names cause {entry.cause.value!r}, which is not in causes")
        if self.id in self.related:
            raise ValueError("a case cannot be related to itself")
        return self

    @property
    def year(self) -> int:
        """The first year the date names (ranges count from their start)."""
        return int(self.date[:4])

    @property
    def last_year(self) -> int:
        """The last year the date names (equal to ``year`` unless the date is a range)."""
        return int(self.date.rsplit(" ", 1)[-1][:4])


class Topic(_Strict):
    """A named collection of cases with a short description (``incidents/topics.yaml``)."""

    name: str
    title: str
    description: str

    @field_validator("name")
    @classmethod
    def _name_form(cls, value: str) -> str:
        if not SLUG_RE.match(value):
            raise ValueError(f"topic name must be a slug, got {value!r}")
        return value
