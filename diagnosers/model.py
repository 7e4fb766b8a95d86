"""The trace model: a columnar operation table plus job metadata.

One row per operation, stored as parallel numpy arrays (no Python object per op) so that a
two-million-op job fits in memory and the engine can work on whole columns. Column names and the
``-1`` conventions follow the study artifact's schema (see ``docs/FORMAT.md``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from diagnosers.thresholds import DEFAULT_GPUS_PER_HOST


class OpKind(StrEnum):
    """How the what-if method treats an op type."""

    COMPUTE = "compute"  # local op, ideal duration = mean
    PP_COMM = "pp-comm"  # point-to-point between neighbouring stages
    DP_COMM = "dp-comm"  # collective over the DP group, synchronised across DP ranks
    GROUP_COMM = "group-comm"  # collective over a fixed group (embedding: first+last stage)
    LOCAL_COMM = "local-comm"  # TP-group collective; TP is collapsed so it is a local op
    BARRIER = "barrier"  # global collective across every stage and DP rank


# The modelled op types (METHOD.md A1), in a fixed order: an op's ``optype`` column holds an index
# into this tuple. Never reorder; append only.
OPTYPES: tuple[str, ...] = (
    "forward-compute",
    "backward-compute",
    "optimizer",
    "gc",
    "forward-send",
    "forward-recv",
    "backward-send",
    "backward-recv",
    "params-all-gather",
    "grads-reduce-scatter",
    "separate-grads-all-reduce",
    "embedding-grads-all-reduce",
    "layernorm-grads-all-reduce",
    "optimizer-clip-main-grad",
)
OPTYPE_CODE: dict[str, int] = {name: i for i, name in enumerate(OPTYPES)}

OPTYPE_KIND: dict[str, OpKind] = {
    "forward-compute": OpKind.COMPUTE,
    "backward-compute": OpKind.COMPUTE,
    "optimizer": OpKind.COMPUTE,
    "gc": OpKind.COMPUTE,
    "forward-send": OpKind.PP_COMM,
    "forward-recv": OpKind.PP_COMM,
    "backward-send": OpKind.PP_COMM,
    "backward-recv": OpKind.PP_COMM,
    "params-all-gather": OpKind.DP_COMM,
    "grads-reduce-scatter": OpKind.DP_COMM,
    "separate-grads-all-reduce": OpKind.DP_COMM,
    "embedding-grads-all-reduce": OpKind.GROUP_COMM,
    "layernorm-grads-all-reduce": OpKind.LOCAL_COMM,
    "optimizer-clip-main-grad": OpKind.BARRIER,
}

# Idealisation treats every non-compute kind as communication (median), compute as mean.
COMM_OPTYPES: frozenset[str] = frozenset(n for n, k in OPTYPE_KIND.items() if k is not OpKind.COMPUTE)
COMPUTE_OPTYPES: frozenset[str] = frozenset(n for n, k in OPTYPE_KIND.items() if k is OpKind.COMPUTE)
P2P_OPTYPES: tuple[str, ...] = ("forward-send", "forward-recv", "backward-send", "backward-recv")

# Batched P2P names are split into their two directional ops with the same timing.
BATCHED_P2P: dict[str, tuple[str, str]] = {
    "forward-send-backward-recv": ("forward-send", "backward-recv"),
    "backward-send-forward-recv": ("backward-send", "forward-recv"),
    "forward-send-forward-recv": ("forward-send", "forward-recv"),
    "backward-send-backward-recv": ("backward-send", "backward-recv"),
}

# Other spellings of a modelled slot.
ALIASES: dict[str, str] = {
    "grads-reduce": "grads-reduce-scatter",
    "grads-all-reduce": "grads-reduce-scatter",
}

# Names folded into the surrounding compute (tensor-parallel collectives: TP is collapsed).
FOLDED_PREFIXES: tuple[str, ...] = ("tp-",)

# Wrapper and sub-timer spans: ignored, with a note in the report.
IGNORED_NAMES: frozenset[str] = frozenset(
    {
        "train-step",
        "forward-backward",
        "optimizer-inner-step",
        "optimizer-copy-to-main-grad",
        "optimizer-copy-main-to-model-params",
        "optimizer-count-zeros",
        "batch-generator",
        "interval-time",
        "first-op",
        "forward-backward-send-forward-backward-recv",
    }
)
IGNORED_SUFFIXES: tuple[str, ...] = ("-nonoverlapping",)


class NameClass(StrEnum):
    """What the op-name table says to do with a recorded name."""

    MODELLED = "modelled"
    BATCHED = "batched"
    ALIAS = "alias"
    FOLDED = "folded"
    IGNORED = "ignored"
    UNKNOWN = "unknown"


def int_ranges(values: Iterable[int], sep: str = ", ") -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``: distinct ints, sorted, as compact ranges (for messages)."""
    vals = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return sep.join(out)


def classify_name(name: str) -> NameClass:
    """Look a recorded op name up in the op-name table (docs/FORMAT.md)."""
    if name in OPTYPE_CODE:
        return NameClass.MODELLED
    if name in BATCHED_P2P:
        return NameClass.BATCHED
    if name in ALIASES:
        return NameClass.ALIAS
    if name.startswith(FOLDED_PREFIXES):
        return NameClass.FOLDED
    if name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES):
        return NameClass.IGNORED
    return NameClass.UNKNOWN


class TraceError(ValueError):
    """Bad input. The message says what is wrong and where (file, rank, step, op)."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        rank: int | None = None,
        step: int | None = None,
        op: str | None = None,
    ) -> None:
        self.file, self.rank, self.step, self.op = file, rank, step, op
        where = [
            f"{k}={v}"
            for k, v in (("file", file), ("rank", rank), ("step", step), ("op", op))
            if v is not None
        ]
        self.detail = message
        super().__init__(f"{message} ({', '.join(where)})" if where else message)


# A plain dataclass, so that reading a trace and ``analyze`` never import pydantic; the report
# models hold it as their ``job`` field, and pydantic validates and describes it from these field
# declarations (``ge`` bounds and descriptions in the field metadata, no extra keys), with the same
# JSON schema as when it was a pydantic model. Values already of their field's type and within
# bounds are taken as they are; any other value (a string "2", an int where a float is declared, a
# size below 1) goes through pydantic's validation of this class, which converts it as it always
# did or raises its ``ValidationError`` naming the field.
@dataclass
class JobMeta:
    """Job metadata: parallel sizes and what the analysis needs to know about the hardware."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    trial_name: str = "job"
    run_id: str | int = 0
    dp: int = field(default=1, metadata={"ge": 1, "description": "data-parallel size"})
    pp: int = field(default=1, metadata={"ge": 1, "description": "pipeline-parallel size (stages)"})
    tp: int = field(
        default=1,
        metadata={"ge": 1, "description": "tensor-parallel size (collapsed: one traced rank per group)"},
    )
    cp: int = field(
        default=1, metadata={"ge": 1, "description": "context-parallel size (the artifact's dsp_size)"}
    )
    vpp: int = field(
        default=1, metadata={"ge": 1, "description": "virtual pipeline stages (model chunks) per stage"}
    )
    world_size: int = field(default=0, metadata={"ge": 0, "description": "dp*pp*tp*cp; 0 means derive it"})
    gpus_per_host: int = field(default=DEFAULT_GPUS_PER_HOST, metadata={"ge": 1})
    layers_per_stage: list[int] | None = field(
        default=None, metadata={"description": "transformer layers on each PP stage, if known"}
    )
    layers_per_chunk: list[list[float]] | None = field(
        default=None,
        metadata={
            "description": "interleaved jobs: transformer layers of each model chunk, per stage, if known"
        },
    )
    source_format: str | None = field(
        default=None, metadata={"description": "the reader that produced the trace"}
    )

    def __post_init__(self) -> None:
        if not _meta_values_plain(self):
            from pydantic import TypeAdapter

            # pydantic converts or refuses, as for any model field; the converted values pass the
            # plain test, so its own construction of the class does not come back here
            given = {f.name: getattr(self, f.name) for f in fields(self)}
            checked = TypeAdapter(JobMeta).validate_python(given)
            self.__dict__.update(checked.__dict__)
        if self.world_size == 0:
            self.world_size = self.dp * self.pp * self.tp * self.cp
        if self.layers_per_stage is not None and len(self.layers_per_stage) != self.pp:
            raise ValueError(
                f"layers_per_stage has {len(self.layers_per_stage)} entries but pp={self.pp}"
            )
        lpc = self.layers_per_chunk
        if lpc is not None and (len(lpc) != self.pp or any(len(row) != self.vpp for row in lpc)):
            raise ValueError(
                f"layers_per_chunk must list vpp={self.vpp} chunks for each of pp={self.pp} stages"
            )

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        """The fields as a dict (lists copied), as the report's ``job`` holds them in JSON."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("layers_per_stage", "layers_per_chunk"):
            if out[key] is not None:
                out[key] = [list(x) if isinstance(x, list) else x for x in out[key]]
        return out

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> JobMeta:
        """A copy with ``update``'s fields replaced (validated like a new instance)."""
        return dataclasses.replace(self, **dict(update or {}))

    @classmethod
    def from_artifact_yaml(cls, data: Mapping[str, Any], **overrides: Any) -> JobMeta:
        """Build from the artifact's meta yaml keys (dp_size, pp_size, tp_size, dsp_size, ...)."""
        mapping = {
            "dp_size": "dp",
            "pp_size": "pp",
            "tp_size": "tp",
            "dsp_size": "cp",
            "cp_size": "cp",
            "vpp_size": "vpp",
        }
        kw: dict[str, Any] = {}
        for key, value in data.items():
            if key in mapping:
                kw[mapping[key]] = value
            elif key in _META_FIELDS:
                kw[key] = value
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)

    def to_artifact_yaml(self) -> dict[str, Any]:
        """The artifact's meta keys plus ``gpus_per_host`` and ``layers_per_stage``."""
        out: dict[str, Any] = {
            "trial_name": self.trial_name,
            "run_id": self.run_id,
            "dp_size": self.dp,
            "dsp_size": self.cp,
            "pp_size": self.pp,
            "tp_size": self.tp,
            "vpp_size": self.vpp,
            "world_size": self.world_size,
            "gpus_per_host": self.gpus_per_host,
        }
        if self.layers_per_stage is not None:
            out["layers_per_stage"] = list(self.layers_per_stage)
        if self.layers_per_chunk is not None:
            out["layers_per_chunk"] = [list(row) for row in self.layers_per_chunk]
        return out


_META_FIELDS: frozenset[str] = frozenset(f.name for f in fields(JobMeta))
_SIZES = ("dp", "pp", "tp", "cp", "vpp", "gpus_per_host")


def _meta_values_plain(m: JobMeta) -> bool:
    """Whether every field of ``m`` already holds its declared type (exactly: no bool for an int,
    no int for a float) within its bounds, so pydantic's validation would return it unchanged."""

    def ints(v: Any, low: int) -> bool:
        return type(v) is int and v >= low

    lps, lpc = m.layers_per_stage, m.layers_per_chunk
    return (
        type(m.trial_name) is str
        and type(m.run_id) in (str, int)
        and all(ints(getattr(m, k), 1) for k in _SIZES)
        and ints(m.world_size, 0)
        and (lps is None or (type(lps) is list and all(type(x) is int for x in lps)))
        and (
            lpc is None
            or (type(lpc) is list and all(type(r) is list and all(type(x) is float for x in r) for r in lpc))
        )
        and (m.source_format is None or type(m.source_format) is str)
    )


# Column name -> dtype of the operation table (the artifact schema; optype is a code into OPTYPES).
COLUMNS: dict[str, npt.DTypeLike] = {
    "dp_rank": np.int32,
    "stage": np.int32,
    "rank": np.int64,
    "step": np.int64,
    "optype": np.int16,
    "start_ts": np.float64,
    "duration": np.float64,
    "seq_id": np.int32,
    "mc": np.int32,
    "gmc": np.int32,
    "mb_id": np.int32,
}


@dataclass
class OpTable:
    """Columnar operations: parallel arrays, one entry per op.

    ``start_ts`` and ``duration`` are seconds. ``start_ts`` may be absolute or relative to the step
    start (the engine only uses differences within a step). ``mc``, ``gmc`` and ``mb_id`` are -1 where
    not applicable; ``seq_id`` is the op's position among ops of the same type on the same worker in
    the same step, by start time.
    """

    dp_rank: npt.NDArray[np.int32]
    stage: npt.NDArray[np.int32]
    rank: npt.NDArray[np.int64]
    step: npt.NDArray[np.int64]
    optype: npt.NDArray[np.int16]
    start_ts: npt.NDArray[np.float64]
    duration: npt.NDArray[np.float64]
    seq_id: npt.NDArray[np.int32]
    mc: npt.NDArray[np.int32]
    gmc: npt.NDArray[np.int32]
    mb_id: npt.NDArray[np.int32]

    def __post_init__(self) -> None:
        n = len(self.dp_rank)
        for name, dtype in COLUMNS.items():
            arr = np.ascontiguousarray(getattr(self, name), dtype=dtype)
            if arr.ndim != 1 or len(arr) != n:
                raise TraceError(f"column {name!r} has shape {arr.shape}, expected ({n},)")
            setattr(self, name, arr)

    def __len__(self) -> int:
        return len(self.dp_rank)

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any]) -> OpTable:
        """Build from a mapping of column name to array-like; ``optype`` may hold names or codes."""
        missing = [c for c in COLUMNS if c not in columns]
        if missing:
            raise TraceError(f"missing columns: {', '.join(missing)}")
        cols = dict(columns)
        opt = np.asarray(cols["optype"])
        if opt.dtype.kind in "USO":
            cols["optype"] = encode_optypes(opt)
        return cls(**{name: cols[name] for name in COLUMNS})

    @classmethod
    def concat(cls, tables: Sequence[OpTable]) -> OpTable:
        if not tables:
            return cls.empty()
        return cls(**{c: np.concatenate([getattr(t, c) for t in tables]) for c in COLUMNS})

    @classmethod
    def empty(cls) -> OpTable:
        return cls(**{c: np.zeros(0, dtype=d) for c, d in COLUMNS.items()})

    def take(self, index: npt.ArrayLike) -> OpTable:
        """Rows selected by an integer index or a boolean mask."""
        idx = np.asarray(index)
        return OpTable(**{c: getattr(self, c)[idx] for c in COLUMNS})

    def optype_names(self) -> npt.NDArray[np.str_]:
        """The ``optype`` column as strings."""
        return np.asarray(OPTYPES)[self.optype]

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        return {c: getattr(self, c) for c in COLUMNS}

    @property
    def end_ts(self) -> npt.NDArray[np.float64]:
        return self.start_ts + self.duration


def encode_optypes(names: Iterable[str] | npt.NDArray[Any]) -> npt.NDArray[np.int16]:
    """Map modelled op-type names to codes; raises ``TraceError`` naming the first unknown one."""
    arr = np.asarray(names, dtype=object)
    uniq, inverse = np.unique(arr.astype(str), return_inverse=True)
    codes = np.empty(len(uniq), dtype=np.int16)
    for i, name in enumerate(uniq):
        if name not in OPTYPE_CODE:
            raise TraceError(f"unknown op type {name!r}", op=str(name))
        codes[i] = OPTYPE_CODE[name]
    return codes[inverse].astype(np.int16)


@dataclass
class Trace:
    """An operation table with its job metadata and what the reader noted while reading it."""

    ops: OpTable
    meta: JobMeta
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    # dependencies stated by the reader (a ``kernel_graph.ExplicitGraph``), None for the named model
    graph: Any = None

    @property
    def steps(self) -> list[int]:
        return [int(s) for s in np.unique(self.ops.step)]

    @property
    def n_workers(self) -> int:
        return self.meta.dp * self.meta.pp
