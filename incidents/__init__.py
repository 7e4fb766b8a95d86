"""The incident library: real, sourced cases of slow or failing LLM training, with typo-tolerant
search, topics, a controlled vocabulary and similar-case retrieval.

Plain functions (used by the MCP tools, the REST routes and the CLI)::

    from incidents import search_incidents, get_incident, list_incidents, get_topic, vocab
    from incidents import similar_incidents

Cases live in ``incidents/cases/IL-NNNN.yaml`` (one human-editable file each), topics in
``incidents/topics.yaml``. This package imports ``diagnosers.vocab`` but never ``server``.
"""

from incidents.library import Library, load_library
from incidents.schema import (
    Case,
    CaseFileError,
    IncidentLibraryError,
    InvalidFilterError,
    UnknownIncidentError,
    UnknownTopicError,
)
from incidents.search import (
    IncidentFilters,
    IncidentHit,
    IncidentResults,
    TopicCases,
    Vocabulary,
    get_incident,
    get_topic,
    list_incidents,
    search_incidents,
    vocab,
)
from incidents.similar import similar_incidents

__all__ = [
    "Case",
    "CaseFileError",
    "IncidentFilters",
    "IncidentHit",
    "IncidentLibraryError",
    "IncidentResults",
    "InvalidFilterError",
    "Library",
    "TopicCases",
    "UnknownIncidentError",
    "UnknownTopicError",
    "Vocabulary",
    "get_incident",
    "get_topic",
    "list_incidents",
    "load_library",
    "search_incidents",
    "similar_incidents",
    "vocab",
]
