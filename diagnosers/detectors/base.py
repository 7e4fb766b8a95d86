"""What every detector shares: the match model, trace statistics and the what-if probe.

A detector is a plain function ``detect(report, stats) -> CauseMatch | None`` (see
:mod:`diagnosers.detectors.registry`). ``stats`` holds per-worker numbers computed once from the
op table, plus an optional :class:`Probe` over the what-if engine so a detector can test its
candidate location the method's way: idealise only those ops and measure the share of the job's
slowdown that disappears (the ``rem`` ratio of M_W / M_S, METHOD.md A5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, overload

import numpy as np
import numpy.typing as npt

from diagnosers.npplain import unique
from diagnosers.plainmodel import PlainModel, pydantic_checked, validating
from diagnosers.vocab import CAUSE_TO_CATEGORIES, CauseId, Location, Pattern

if TYPE_CHECKING:
    from diagnosers.signature import CauseSignature

_T = TypeVar("_T")

Evidence = dict[str, float | int | str | bool | list[float] | list[int] | list[str] | None]


# The verdict's value types are plain dataclasses that pydantic validates and describes where it
# is loaded (the models holding them: Diagnosis, the server's results), with the JSON schema they
# had as models (:mod:`diagnosers.plainmodel`): the CLI's diagnosis imports no pydantic.
@dataclass(kw_only=True)
class CauseMatch(PlainModel):
    """A detector's verdict: which cause, how sure, where, what shape, and the numbers behind it."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    id: CauseId
    confidence: float = field(metadata={"ge": 0.0, "le": 1.0})
    location: Location
    pattern: Pattern
    evidence: Evidence = field(default_factory=dict)
    summary: str
    categories: list[str] = field(
        default_factory=list, metadata={"description": "matching incident categories"}
    )
    marginal_gain: float | None = field(
        default=None,
        metadata={
            "ge": 1.0,
            "description": "job speedup T_now / T_after if only this cause were fixed and every "
            "other left as it is, simulated by the what-if engine (set by the diagnosis; None when "
            "not simulated)",
        },
    )
    marginal_basis: str | None = field(
        default=None, metadata={"description": "what the marginal-gain run changed"}
    )

    def __post_init__(self) -> None:
        if validating():
            return
        c, g, b = self.confidence, self.marginal_gain, self.marginal_basis
        plain = (
            type(self.id) is CauseId
            and type(c) is float
            and 0.0 <= c <= 1.0
            and type(self.location) is Location
            and type(self.pattern) is Pattern
            and type(self.summary) is str
            and _plain_evidence(self.evidence)
            and type(self.categories) is list
            and all(type(x) is str for x in self.categories)
            and (g is None or (type(g) is float and g >= 1.0))
            and (b is None or type(b) is str)
        )
        if not plain:
            pydantic_checked(self)

    def signature(self) -> CauseSignature:
        """The comparable signature the incident library searches with."""
        from diagnosers.signature import CauseSignature

        return CauseSignature(
            cause=self.id, pattern=self.pattern, location=self.location, confidence=self.confidence
        )


_SCALARS = (float, int, str, bool, type(None))


def _plain_evidence(evidence: Any) -> bool:
    """Whether every evidence value is one pydantic keeps as it is: a float, int, str, bool or None,
    or a list (empty, or of floats, of ints or of strs, one type each). Anything else (numpy
    scalars, tuples, mixed lists) is pydantic's to convert or refuse."""
    if type(evidence) is not dict:
        return False
    for key, value in evidence.items():
        kind = type(value)
        if type(key) is not str:
            return False
        if kind in _SCALARS or (kind is list and not value):
            continue
        if kind is not list or type(value[0]) not in (float, int, str):
            return False
        first = type(value[0])
        if any(type(x) is not first for x in value):
            return False
    return True


def categories_for(cause: CauseId) -> list[str]:
    """The incident-library categories a cause belongs to (the vocabulary's map; [] for none)."""
    return list(CAUSE_TO_CATEGORIES.get(cause, ()))


class Engine(Protocol):
    """The part of the what-if engine the probe uses (``diagnosers.whatif.build_engine``)."""

    @property
    def original(self) -> npt.NDArray[np.float64]: ...

    @property
    def ideal(self) -> npt.NDArray[np.float64]: ...

    @property
    def nodelay_step_times(self) -> npt.NDArray[np.float64]: ...

    @property
    def ideal_step_time(self) -> float: ...

    def simulate(self, durations: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]: ...

    def simulate_masked(
        self, masks: Sequence[npt.NDArray[np.bool_]], *, ideal_inside: bool = True
    ) -> npt.NDArray[np.float64]: ...

    @property
    def fills_every_cell(self) -> bool: ...

    def type_values(self, codes: Iterable[int]) -> dict[int, npt.NDArray[np.float64]] | None: ...

    def cell_sums(
        self, codes: tuple[int, ...], steps: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64] | None: ...

    def type_blocks(self, codes: Iterable[int]) -> list[tuple[int, int, npt.NDArray[np.float64]]] | None: ...

    def order_statistic(
        self, code: int, fraction: float, steps: npt.NDArray[np.bool_] | None = None, per_step: bool = False
    ) -> npt.NDArray[np.float64] | None: ...


def cell_ids(
    step_index: npt.NDArray[np.integer[Any]],
    worker: npt.NDArray[np.integer[Any]],
    per_step: int,
    n_steps: int,
) -> npt.NDArray[np.signedinteger[Any]]:
    """Each row's (step, worker) cell ``step_index * per_step + worker`` (``worker`` below
    ``per_step``, ``step_index`` below ``n_steps``): int32 when every cell id, below ``n_steps *
    per_step``, fits one (half the memory of int64, which their readers first touch), else int64.
    The same integers either way; readers that compute with a cell widen it first."""
    if n_steps * per_step <= np.iinfo(np.int32).max:
        out = np.multiply(step_index, per_step, dtype=np.int32, casting="unsafe")  # (each below 2^31)
        out += worker
        return out
    return step_index * np.int64(per_step) + worker


class Probe:
    """What-if runs over one trace: mean step time of any duration vector, and fix ratios.

    ``original`` / ``ideal`` are per-op durations (transfer durations for communication) aligned
    with the trace's op rows; ``simulate`` takes a (k, n_ops) batch and returns (k, n_steps) step
    times with launch delay 0. ``t_orig`` / ``t_ideal`` are the means over steps of the two runs,
    taken from the engine, which has already simulated both for the report.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.original = np.asarray(engine.original, dtype=np.float64)
        self._ideal: npt.NDArray[np.float64] | None = None  # per row, made on first use (property)
        self.t_orig = float(np.mean(engine.nodelay_step_times))
        self.t_ideal = float(engine.ideal_step_time)
        # masked runs already made, by (ideal_inside, mask): the remedies and marginal gains ask
        # again for scenarios the detectors ran (a faulty machine's workers, drained)
        self._masked: dict[tuple[bool, int, bytes], float] = {}
        # runs of read-only duration vectors (the statistics' shared scenarios, TraceStats.cached),
        # by identity: the vector is kept here, so its id stays its own, and cannot change
        self._vectors: dict[int, tuple[npt.NDArray[np.float64], float]] = {}
        # read-only vectors announced with ``ahead``: they join the next batch of vector runs
        self._ahead: list[npt.NDArray[np.float64]] = []
        # masked scenarios announced with ``ahead_masked`` (by key): they join the next batch of
        # masked runs in the ideal-inside direction
        self._ahead_masks: dict[tuple[bool, int, bytes], npt.NDArray[np.bool_]] = {}
        # with an op in every cell of the engine's dense layout, "mask original, the rest ideal"
        # is the scenario "the rest ideal, mask original": both directions share one memo entry
        self._complement_is_same = bool(engine.fills_every_cell)

    @property
    def ideal(self) -> npt.NDArray[np.float64]:
        """Per op: its type's typical duration (``engine.ideal``), gathered on first use: a job
        whose detectors build no scenario from it (a faulty machine's) never makes it."""
        if self._ideal is None:
            self._ideal = np.asarray(self.engine.ideal, dtype=np.float64)
        return self._ideal

    def type_values(self, codes: Iterable[int]) -> dict[int, npt.NDArray[np.float64]] | None:
        """Per op-type code of ``codes`` that the trace has: the original durations of all its ops,
        in an order of their own (the engine's dense layout, node by node), or None where the
        engine cannot give them so (``WhatIfEngine.type_values``). For statistics that do not
        depend on the order of the values (quantiles), without finding and gathering the rows."""
        return self.engine.type_values(codes)

    def step_times(self, durations: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Simulated step times, shape (k, n_steps), for a (k, n_ops) or (n_ops,) batch."""
        d = np.atleast_2d(np.asarray(durations, dtype=np.float64))
        return np.atleast_2d(np.asarray(self.engine.simulate(d), dtype=np.float64))

    def mean_times(
        self, durations: npt.NDArray[np.float64], chunk: int | None = None
    ) -> npt.NDArray[np.float64]:
        """Mean simulated step time per scenario, batched ``chunk`` scenarios per engine pass
        (default: as many as keep one pass near 25M op values, at most 64). Vectors announced
        with :meth:`ahead` ride along in the same batch and are kept for :meth:`means_of`."""
        d = np.atleast_2d(np.asarray(durations, dtype=np.float64))
        extra = [v for v in self._ahead if self._vectors.get(id(v), (None,))[0] is not v]
        self._ahead = []
        if extra and d.shape[1:] == extra[0].shape:
            d = np.concatenate([d, np.stack(extra)])
        else:
            extra = []
        if chunk is None:
            chunk = int(max(1, min(64, 25_000_000 // max(d.shape[1], 1))))
        out = [self.step_times(d[i : i + chunk]).mean(axis=1) for i in range(0, len(d), chunk)]
        times = np.concatenate(out) if out else np.zeros(0)
        n = len(times) - len(extra)
        for v, t in zip(extra, times[n:], strict=True):
            self._vectors[id(v)] = (v, float(t))
        return times[:n]

    def ahead(self, vectors: Sequence[npt.NDArray[np.float64]]) -> None:
        """Announce read-only duration vectors that will be asked for later (:meth:`means_of`):
        the next batch of vector runs, whoever asks for it, runs them too, so they cost no pass
        of their own (a scenario's step times do not depend on the batch it runs in). Writeable
        vectors are ignored: they could change before they run."""
        self._ahead += [v for v in vectors if isinstance(v, np.ndarray) and not v.flags.writeable]

    def means_of(self, vectors: Sequence[npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
        """Mean simulated step time of each (n_ops,) duration vector, every vector not run before
        in one batch (:meth:`mean_times`). A read-only vector (a shared scenario from
        :meth:`TraceStats.cached`) is run once per probe, whoever asks for it."""
        out = np.zeros(len(vectors), dtype=np.float64)
        todo: list[int] = []
        for i, v in enumerate(vectors):
            hit = self._vectors.get(id(v))
            if hit is not None and hit[0] is v:
                out[i] = hit[1]
            else:
                todo.append(i)
        if todo:
            asked = {id(vectors[i]) for i in todo}  # announced ones asked for now run once, here
            self._ahead = [v for v in self._ahead if id(v) not in asked]
            # one vector is run as a view of itself (a stacked copy would add a row-sized array
            # to the pass's peak of live memory: 15 MB at 1.9M ops, the marginal gain's run)
            picked = [vectors[i] for i in todo]
            batch = np.asarray(picked[0])[None] if len(picked) == 1 else np.stack(picked)
            times = self.mean_times(batch)
            for i, t in zip(todo, times, strict=True):
                out[i] = t
                v = vectors[i]
                if isinstance(v, np.ndarray) and not v.flags.writeable:
                    self._vectors[id(v)] = (v, float(t))
        return out

    def shares(
        self, removed: npt.NDArray[np.float64], put_back: npt.NDArray[np.float64]
    ) -> tuple[float, float]:
        """``(share(removed), add_share(put_back))`` from one batch of what-if runs: the ``rem``
        view of a cause's fixed durations and the ``add`` view of its put-back ones, which every
        compute detector asks for together."""
        gap = self.t_orig - self.t_ideal
        if gap <= 1e-12 * max(self.t_orig, 1e-12):
            return 0.0, 0.0
        t_rem, t_add = self.means_of([removed, put_back])
        return float((self.t_orig - t_rem) / gap), float((t_add - self.t_ideal) / gap)

    def masked_means(
        self, masks: Sequence[npt.NDArray[np.bool_]], *, ideal_inside: bool = True
    ) -> npt.NDArray[np.float64]:
        """Mean simulated step time per row mask: the masked ops ideal, the others original
        (``ideal_inside``), or the reverse; the same as :meth:`mean_times` of those vectors, without
        a per-row vector per scenario. Batched up to ``MASKED_BATCH_CELLS`` booleans (at most 64
        scenarios) per engine pass."""
        if not ideal_inside and self._complement_is_same:
            keys = [_mask_key(~np.asarray(m, dtype=bool), True) for m in masks]
        else:
            keys = [_mask_key(m, ideal_inside) for m in masks]
        todo: dict[tuple[bool, int, bytes], npt.NDArray[np.bool_]] = {}  # each new scenario once
        for k, m in zip(keys, masks, strict=True):
            if k not in self._masked:
                todo.setdefault(k, m)
        if todo and ideal_inside:
            # the announced scenarios ride along with a batch that runs anyway (a scenario's step
            # times do not depend on the batch it is simulated in)
            for k, m in self._ahead_masks.items():
                if k not in self._masked:
                    todo.setdefault(k, m)
            self._ahead_masks = {}
        order = list(todo)
        n = max(len(self.original), 1)
        chunk = int(max(1, min(64, MASKED_BATCH_CELLS // n)))
        for c in range(0, len(order), chunk):
            part = order[c : c + chunk]
            run = self.engine.simulate_masked([todo[k] for k in part], ideal_inside=ideal_inside)
            for k, t in zip(part, np.asarray(run).mean(axis=1), strict=True):
                self._masked[k] = float(t)
        return np.array([self._masked[k] for k in keys], dtype=np.float64)

    def ahead_masked(self, masks: Sequence[npt.NDArray[np.bool_]], ideal_inside: Sequence[bool]) -> None:
        """Announce masked scenarios (:meth:`masked_means` of ``masks[i]`` in direction
        ``ideal_inside[i]``) that will be asked for later: the next batch of masked runs with the
        masked ops ideal, whoever asks for it, runs them too, so they cost no engine pass of their
        own. A scenario "mask original, the rest ideal" joins only when it is "the complement
        ideal" (an op in every cell of the dense layout); otherwise it runs when asked for."""
        for m, inside in zip(masks, ideal_inside, strict=True):
            m = np.asarray(m, dtype=bool)
            if not inside:
                if not self._complement_is_same:
                    continue
                m = ~m
            k = _mask_key(m, True)
            if k not in self._masked:
                self._ahead_masks.setdefault(k, m)

    def mixed_means(
        self, masks: Sequence[npt.NDArray[np.bool_]], ideal_inside: Sequence[bool]
    ) -> npt.NDArray[np.float64]:
        """:meth:`masked_means` of each mask in its own direction (``ideal_inside[i]``). With an op
        in every cell of the dense layout "mask original, the rest ideal" is "the complement ideal",
        so every scenario goes into one batch of runs; otherwise one batch per direction."""
        if len(masks) != len(ideal_inside):
            raise ValueError(f"{len(masks)} masks but {len(ideal_inside)} directions")
        out = np.zeros(len(masks), dtype=np.float64)
        if self._complement_is_same:
            pairs = zip(masks, ideal_inside, strict=True)
            flipped = [m if inside else ~np.asarray(m, dtype=bool) for m, inside in pairs]
            if flipped:
                out[:] = self.masked_means(flipped)
            return out
        for direction in (True, False):
            at = [i for i, inside in enumerate(ideal_inside) if bool(inside) is direction]
            if at:
                out[at] = self.masked_means([masks[i] for i in at], ideal_inside=direction)
        return out

    def idealised(self, mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        """Original durations with the masked ops set to their ideal (typical) duration."""
        return np.where(mask, self.ideal, self.original)

    def fix_ratios(self, masks: Sequence[npt.NDArray[np.bool_]]) -> list[float]:
        """For each op mask, ``(T - T_rem) / (T - T_ideal)``: the share of the slowdown removed by
        idealising only those ops (may exceed 1, like M_S). 0 when the job has no slowdown."""
        if not masks:
            return []
        gap = self.t_orig - self.t_ideal
        if gap <= 1e-12 * max(self.t_orig, 1e-12):
            return [0.0 for _ in masks]
        t_rem = self.masked_means(masks)
        return [float((self.t_orig - t) / gap) for t in t_rem]

    def share(self, durations: npt.NDArray[np.float64]) -> float:
        """``(T - T_after) / (T - T_ideal)`` for one fixed duration vector (the ``rem`` view)."""
        gap = self.t_orig - self.t_ideal
        if gap <= 1e-12 * max(self.t_orig, 1e-12):
            return 0.0
        return float((self.t_orig - self.mean_times(durations)[0]) / gap)

    def add_share(self, durations: npt.NDArray[np.float64]) -> float:
        """``(T_add - T_ideal) / (T - T_ideal)`` for a vector that puts only one cause back into the
        ideal run (the artifact's ``add`` view of M_W). Unlike ``rem`` it does not depend on what
        the other ops do; e.g. when batched P2P transfers absorb compute waits (interleaved
        schedules), idealising compute alone leaves those transfers slow, putting it back does not."""
        gap = self.t_orig - self.t_ideal
        if gap <= 1e-12 * max(self.t_orig, 1e-12):
            return 0.0
        return float((self.mean_times(durations)[0] - self.t_ideal) / gap)

    def speedup(self, durations: npt.NDArray[np.float64]) -> float:
        """``T_now / T_after`` for one changed duration vector (never below 1)."""
        t_after = float(self.mean_times(durations)[0])
        return max(1.0, self.t_orig / t_after) if t_after > 0 else 1.0


# A masked batch holds one boolean per op and scenario (the engine mixes each node's two values
# itself, and frees every node's result once its successors have it), not a float vector per
# scenario: 200M booleans keep a batch near 200 MB, so a 15M-op job runs 13 scenarios per pass
# where the 25M-float bound of vector batches (:meth:`Probe.mean_times`) allowed one.
MASKED_BATCH_CELLS = 200_000_000


def _mask_key(mask: npt.NDArray[np.bool_], ideal_inside: bool) -> tuple[bool, int, bytes]:
    """A masked scenario's identity: its direction, its length and its bits, packed eight to a
    byte (each scenario's mean step time does not depend on the batch it was simulated in). The
    packed bits themselves are the key (an eighth of the mask; a few dozen masks per diagnosis):
    hashing them is as fast as a digest, and a diagnosis does not import ``hashlib`` for it."""
    bits = np.packbits(np.asarray(mask, dtype=bool))
    return ideal_inside, len(mask), bits.tobytes()


class Deferred(Generic[_T]):
    """A :class:`TraceStats` statistic given as how to make it: ``make()`` runs on its first read
    (never, when no detector reads it), then the value is kept (:class:`OnFirstRead`)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], _T]) -> None:
        self.make = make


class OnFirstRead(Generic[_T]):
    """A :class:`TraceStats` field that takes a value or a :class:`Deferred`: reading it gives the
    value, made on the first read from a deferred one and then kept. The field is an ordinary
    one for its readers, the constructor and ``dataclasses.replace`` (which reads it, so makes it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_deferred_{name}"

    @overload
    def __get__(self, obj: None, objtype: Any = None) -> OnFirstRead[_T]: ...
    @overload
    def __get__(self, obj: object, objtype: Any = None) -> _T: ...
    def __get__(self, obj: object | None, objtype: Any = None) -> _T | OnFirstRead[_T]:
        if obj is None:
            raise AttributeError(self.name)  # read on the class: the field has no default
        value = obj.__dict__[self.slot]
        if isinstance(value, Deferred):
            value = value.make()
            obj.__dict__[self.slot] = value
        return value

    def __set__(self, obj: object, value: _T | Deferred[_T]) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class TraceStats:
    """Per-worker statistics of one trace, computed once (vectorised) for all detectors.

    Arrays over workers are indexed ``[dp_rank, pp_rank]``; over worker-steps ``[step_index,
    dp_rank, pp_rank]`` with ``steps[step_index]`` the step id.
    """

    steps: npt.NDArray[np.int64]
    dp: int
    pp: int
    gpus_per_host: int
    rank_of: npt.NDArray[np.int64]  # (dp, pp) traced global rank, -1 if absent
    compute: npt.NDArray[np.float64]  # (S, dp, pp) forward+backward compute seconds per step
    step_time: npt.NDArray[np.float64]  # (S,) measured step time
    fwd_bwd_corr_within: dict[int, float]  # the same, each normalised by its own worker-step median
    optimizer: npt.NDArray[np.float64]  # (S, dp, pp) optimizer seconds per step
    fwd_excess: npt.NDArray[np.float64]  # per forward op: excess seconds not mirrored by its backward
    fwd_excess_z: npt.NDArray[np.float64]  # per forward op: robust z-score of that excess
    fwd_index: npt.NDArray[np.int64]  # op-table rows of those forward ops
    fwd_typical: npt.NDArray[np.float64]  # per forward op: median forward of its (stage, chunk)
    n_ops: int
    optype: npt.NDArray[np.int16]
    op_dp: npt.NDArray[np.int32]
    op_pp: npt.NDArray[np.int32]
    op_step_index: npt.NDArray[np.int64]
    op_gmc: npt.NDArray[np.int32]  # global model chunk (-1 where not applicable)
    transfer: npt.NDArray[np.float64]  # per op: the engine's original duration (transfer time for comm)
    probe: Probe | None = None
    op_start: npt.NDArray[np.float64] | None = None  # per op: start time (seconds), for batched P2P
    layers_per_stage: list[int] | None = None  # from the job metadata, when known
    # per op: its microbatch (the trace's microbatch id, else its position among the worker's ops
    # of its type in the step); None when not known
    op_mb: npt.NDArray[np.int32] | None = None
    # whether the compute ops are microbatches of the model (named spans); False on a kernel-level
    # job, whose compute ops are segments of one pass cut at its collectives (``op_mb``: positions)
    microbatches: bool = True
    notes: list[str] = field(default_factory=list)
    _op_worker: npt.NDArray[np.int32] | None = field(default=None, init=False, repr=False, compare=False)
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    # Statistics that some detectors read only when they match, given as a value or a Deferred
    # (made on first read: OnFirstRead), keyword-only: the descriptor is no default
    _: KW_ONLY
    # (S, dp, pp) idle seconds before the first forward
    launch_idle: OnFirstRead[npt.NDArray[np.float64]] = OnFirstRead()
    # stage -> correlation of per-microbatch fwd and bwd durations
    fwd_bwd_corr: OnFirstRead[dict[int, float]] = OnFirstRead()
    # backwards whose excess over what their forward explains looks like a pause
    bwd_outliers: OnFirstRead[int] = OnFirstRead()
    # (pp,) mean forward- and backward-compute duration per stage
    stage_fwd_mean: OnFirstRead[npt.NDArray[np.float64]] = OnFirstRead()
    stage_bwd_mean: OnFirstRead[npt.NDArray[np.float64]] = OnFirstRead()

    def cached(self, key: Any, make: Callable[[], npt.NDArray[Any]]) -> npt.NDArray[Any]:
        """``make()`` computed once per ``key`` and shared, read-only: a scenario the detector, its
        remedy and its marginal gain all simulate (e.g. the rebalanced durations) is built once and,
        being read-only, run once by the probe (:meth:`Probe.means_of`)."""
        if key not in self._cache:
            value = np.asarray(make()).view()  # a view: the maker's own array stays writeable
            value.flags.writeable = False
            self._cache[key] = value
        return self._cache[key]

    def shared(self, key: Any, make: Callable[[], _T]) -> _T:
        """``make()`` computed once per ``key`` for every detector that asks: a statistic several
        detectors read (the microbatch coherence test). The value is shared: never change it."""
        slot = ("shared", key)
        if slot not in self._cache:
            self._cache[slot] = make()
        return self._cache[slot]

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def of_types(self, codes: Iterable[int]) -> npt.NDArray[np.bool_]:
        """Per op: whether its op-type code is one of ``codes`` (``np.isin`` by a lookup table
        over the few codes, a third of its time on a large trace). Made once per set of codes
        and shared by every detector that asks (read-only)."""
        wanted = np.asarray(sorted({int(c) for c in codes}), dtype=np.int64)

        def make() -> npt.NDArray[np.bool_]:
            if len(wanted) <= 4:
                # a few codes: comparisons stream over the codes, where the table lookup is a
                # gather per op (ten times the time at 1.9M ops); the same booleans
                out = np.zeros(len(self.optype), dtype=bool)
                for c in wanted.tolist():
                    out |= self.optype == c
                return out
            top = int(self.optype.max(initial=-1))
            table = np.zeros(max(top, int(wanted.max(initial=-1))) + 1, dtype=bool)
            table[wanted] = True
            return np.take(table, self.optype)

        return self.cached(("of_types", tuple(wanted.tolist())), make)

    def order_statistics(
        self,
        codes: Sequence[int],
        fraction: float,
        steps: npt.NDArray[np.bool_] | None = None,
        per_step: bool = False,
    ) -> list[npt.NDArray[np.float64]] | None:
        """Per op-type code: each worker's (with ``per_step``: each (step, worker) cell's) value at
        position ``floor(fraction * (n - 1))`` of its ops' ``transfer`` times in ascending order,
        over the ``steps`` mask (``faulty_machine.worker_order_statistic`` of those rows; NaN where
        there are none), read from the engine's dense layout (``WhatIfEngine.order_statistic``).
        None where that cannot be done: no probe, ``transfer`` not the probe's, or an engine whose
        cells are not exactly the rows; the rows' own computation applies then."""
        probe = self.probe
        if probe is None or self.transfer is not probe.original:
            return None
        out = [probe.engine.order_statistic(c, fraction, steps, per_step) for c in codes]
        return None if any(q is None for q in out) else [q for q in out if q is not None]

    @property
    def op_worker(self) -> npt.NDArray[np.int32]:
        """Per op: its flat worker ``dp_rank * pp + pp_rank`` (int32), made once."""
        if self._op_worker is None:
            self._op_worker = (self.op_dp.astype(np.int32) * self.pp + self.op_pp).astype(np.int32)
            self._op_worker.flags.writeable = False
        return self._op_worker

    @property
    def op_cell(self) -> npt.NDArray[np.signedinteger[Any]]:
        """Per op: its (step, worker) cell ``(step_index * dp + dp_rank) * pp + pp_rank``, made once
        (int32 where every cell id fits, ``cell_ids``)."""
        return self.cached(
            "op_cell", lambda: cell_ids(self.op_step_index, self.op_worker, self.dp * self.pp, self.n_steps)
        )

    @property
    def op_host(self) -> npt.NDArray[np.int64]:
        """Per op: its host index (``host_of`` of its worker; -1 where the rank is unknown)."""
        return self.cached("op_host", lambda: self.host_of.reshape(-1)[self.op_worker])

    @property
    def host_of(self) -> npt.NDArray[np.int64]:
        """(dp, pp) host index ``rank // gpus_per_host`` (-1 where the rank is unknown)."""
        return np.where(self.rank_of >= 0, self.rank_of // self.gpus_per_host, -1)

    def location(
        self,
        cells: Iterable[tuple[int, int]],
        steps: Iterable[int] | None = None,
    ) -> Location:
        """A Location naming every member: the cells' DP/PP ranks, global ranks, hosts and steps.

        ``steps`` are step ids; None means every traced step (a persistent cause).
        """
        cl = sorted({(int(d), int(p)) for d, p in cells})
        ranks = sorted({int(self.rank_of[d, p]) for d, p in cl if self.rank_of[d, p] >= 0})
        return Location(
            dp_ranks=sorted({d for d, _ in cl}),
            pp_ranks=sorted({p for _, p in cl}),
            ranks=ranks,
            hosts=sorted({r // self.gpus_per_host for r in ranks}),
            steps=sorted(int(s) for s in (self.steps if steps is None else steps)),
        )

    def worker_mask(self, cells: Iterable[tuple[int, int]]) -> npt.NDArray[np.bool_]:
        """Boolean mask over op rows belonging to the given (dp, pp) cells (read-only, made once per
        set of cells: the faulty-machine detector, its drain remedy and its marginal gain ask for
        the same workers)."""
        wanted = frozenset((int(d), int(p)) for d, p in cells)

        def make() -> npt.NDArray[np.bool_]:
            sel = np.zeros((self.dp, self.pp), dtype=bool)
            for d, p in wanted:
                sel[d, p] = True
            return sel.reshape(-1)[self.op_worker]  # each op's flat worker: one 1-D lookup

        return self.cached(("worker_mask", wanted), make)

    def describe(self) -> dict[str, Any]:
        """The trace's size (steps, dp, pp, op count) for a diagnosis's notes and views."""
        return {"steps": int(self.n_steps), "dp": self.dp, "pp": self.pp, "n_ops": self.n_ops}


# A cause is reported only when fixing it (in a what-if run) removes at least this share of the
# job's slowdown: below a quarter it is a side effect, not a cause worth an alert. The study's
# "most of the slowdown" criterion (M > 50%, METHOD.md A5/A6) is where confidence saturates.
MIN_SHARE = 0.25
MOST_SHARE = 0.5
# A cause beside a larger one holds a small share of the job's whole loss by construction; it is
# still real when, alone, it costs at least this fraction of the ideal step (the 5% that makes an
# injected cause "clear", docs/ACCURACY.md): ``real_share``.
SECONDARY_EFFECT = 0.05


def real_share(share: float, probe: Probe | None) -> bool:
    """Whether a cause's what-if ``share`` (of the gap between the measured and the ideal run;
    the larger of removing it and putting only it back) is real: at least ``MIN_SHARE``, or, as a
    cause beside others, at least ``SECONDARY_EFFECT`` of the ideal step time in seconds
    (``share`` times the gap over the ideal step). Only the first without a probe."""
    if share >= MIN_SHARE:
        return True
    if probe is None or probe.t_ideal <= 0:
        return False
    return share * (probe.t_orig - probe.t_ideal) / probe.t_ideal >= SECONDARY_EFFECT


def confidence(share: float, fit: float) -> float:
    """Confidence in [0, 0.99]: the share of the slowdown the fix removes (capped at 1; saturating
    at :data:`MOST_SHARE` only partly, so a cause explaining everything outranks one explaining
    half) times how well the rest of the signature fits (``fit`` in [0, 1])."""
    s = min(max(share, 0.0), 1.0)
    return round(float(np.clip((0.5 + 0.5 * s) * s**0.5 * fit, 0.0, 0.99)), 3)


def stage_groups(
    stats: TraceStats,
    mask: npt.NDArray[np.bool_],
    keys: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.float64]:
    """Per op: the mean of ``values`` (default ``stats.transfer``) over the masked ops sharing its
    key; unmasked ops keep their value."""
    vals = stats.transfer if values is None else values
    out = vals.copy()
    if not mask.any():
        return out
    k = keys[mask]
    uniq, inv = np.unique(k, return_inverse=True)
    sums = np.bincount(inv, weights=vals[mask], minlength=len(uniq))
    counts = np.bincount(inv, minlength=len(uniq))
    out[mask] = (sums / np.maximum(counts, 1))[inv]
    return out


def rounded(x: float, nd: int = 4) -> float:
    """``x`` as a plain float rounded to ``nd`` places, for evidence values (JSON, no numpy)."""
    return round(float(x), nd)


def host_cluster(stats: TraceStats, cells: Iterable[tuple[int, int]]) -> list[int] | None:
    """The hosts whose traced workers are exactly ``cells``, or None.

    A cluster needs every traced worker of those hosts in ``cells`` and nothing else, at least two
    hosts in the job, and at most a quarter of them (a fault is local; half the job is not).
    """
    cl = {(int(d), int(p)) for d, p in cells}
    if not cl:
        return None
    hosts = stats.host_of
    n_hosts = len(unique(hosts[hosts >= 0]))
    hs = sorted({int(hosts[d, p]) for d, p in cl})
    if n_hosts < 2 or len(hs) > max(1, n_hosts // 4):
        return None
    members = {(int(d), int(p)) for d, p in zip(*np.nonzero(np.isin(hosts, hs)), strict=True)}
    return hs if members == cl else None
