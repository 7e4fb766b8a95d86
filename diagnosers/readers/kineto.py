"""PyTorch profiler (Kineto / Chrome-trace JSON) reader: one ``*.pt.trace.json[.gz]`` per rank.

What it reads (see ``docs/PROFILER-TRACES.md`` and the Kineto research notes):

- **Rank and layout**: ``distributedInfo.rank`` / ``world_size`` (falling back to a ``rank<N>`` /
  ``worker<N>`` file name, then file order); DP / PP / TP / CP membership from ``pg_config`` group
  descriptions where present, otherwise from the ``--dp/--pp/--tp/--cp`` options with Megatron's
  default rank order (TP fastest, then CP, DP, PP slowest); with neither, ``dp = world size``.
  Only ranks with TP rank 0 and CP rank 0 are kept (TP/CP are collapsed, as in the study).
- **Steps**: ``ProfilerStep#N`` spans on the CPU side; without them the whole file is step 0.
- **Timestamps**: µs, absolute epoch or relative to ``baseTimeNanoseconds``; converted to seconds.
- **Ops**, by the first mode that applies:

  1. *named*: ``record_function`` / user annotations that use the Megatron / NDTimeline timer
     names (``forward-compute``, the P2P ops incl. batched ones, ``grads-reduce-scatter``,
     ``optimizer`` ...). GPU-side copies (``gpu_user_annotation``) are preferred when they carry
     the names, since they time the device work.
  2. *plain DP*: no such names. Each step is split into forward / backward / optimizer phases by
     ``## backward ##``-style annotations, autograd-engine ops and ``Optimizer.step#`` spans. The
     compute of a phase is the busy time (union of intervals) of the non-communication GPU kernels
     launched in it, or of the CPU ops when the trace has no kernels. Collectives (NCCL kernels of
     both naming eras; else ``gloo:*`` / ``nccl:*`` CPU annotations) become DP-synced ops:
     ``params-all-gather`` when issued in the forward phase, ``grads-reduce-scatter`` otherwise
     (also when a step shows no backward at all, e.g. a trace of NCCL kernels only).

Everything then goes through :func:`diagnosers.readers.normalize.normalize`.
"""

from __future__ import annotations

import json
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, SupportsIndex

import msgspec
import numpy as np
import numpy.typing as npt

from diagnosers.kernel_graph import ExplicitGraph
from diagnosers.model import (
    P2P_OPTYPES,
    JobMeta,
    NameClass,
    Trace,
    TraceError,
    classify_name,
    int_ranges,
)
from diagnosers.readers import ReadOptions, kineto_kernels, read_failure, validate
from diagnosers.readers.normalize import columns_from_lists

FORMAT_NAMES: tuple[str, ...] = ("kineto", "pytorch-profiler", "chrome-trace")

STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
RANK_IN_NAME_RE = re.compile(r"(?:rank|worker)[_-]?(\d+)", re.IGNORECASE)
# Communication kernels: NCCL (<= 2.18 ``ncclKernel_*``, >= 2.19 ``ncclDevKernel_*``, 2.27+
# ``ncclSymkDevKernel_*``), RCCL (keeps the nccl names) and HCCL.
COMM_KERNEL_RE = re.compile(r"^(?:nccl|rccl|hccl)|ncclKernel|ncclDevKernel|ncclSymk", re.IGNORECASE)
COMM_CPU_PREFIXES: tuple[str, ...] = ("gloo:", "nccl:")
# CPU ops that enqueue or wait for communication: not compute.
NON_COMPUTE_CPU_PREFIXES: tuple[str, ...] = ("c10d::", "record_param_comms", "ProfilerStep", "gloo:", "nccl:")
BACKWARD_ANNOTATION_RE = re.compile(r"^##\s*backward\s*##$|_post_backward|^backward$", re.IGNORECASE)
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function"
OPTIMIZER_ANNOTATION_RE = re.compile(r"^##\s*optimizer\s*##$|^Optimizer\.step#", re.IGNORECASE)

# Older PyTorch (1.8-1.10) spelled the categories differently.
_CAT_ALIASES: dict[str, str] = {
    "Operator": "cpu_op",
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}
# Point-to-point transfers: pipeline traffic, not DP collectives (plain mode cannot place them).
P2P_COLLECTIVE_NAMES: frozenset[str] = frozenset({"send", "recv", "_send", "_recv", "sendrecv"})
P2P_CPU_NAMES: frozenset[str] = frozenset({"gloo:send", "gloo:recv", "nccl:send", "nccl:recv"})
KERNEL_OP_RE = re.compile(r"nccl(?:Symk)?(?:Dev)?Kernel_([A-Za-z]+)")

P2P_NAMES: frozenset[str] = frozenset(P2P_OPTYPES)

_FWD, _BWD, _OPT = 0, 1, 2
_PHASE_COMPUTE = ("forward-compute", "backward-compute", "optimizer")


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object with Kineto's top-level keys (``traceEvents``, ``schemaVersion``, ...)."""
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    return text.startswith("{") and any(
        f'"{k}"' in text for k in ("traceEvents", "schemaVersion", "distributedInfo", "deviceProperties")
    )


def load_json(path: Path) -> Any:
    """Parse a JSON file, gunzipping it when it starts with the gzip magic."""
    try:
        with open(path, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        # a JSON document is parsed whole (Python objects, several bytes per input byte), so
        # its decoded size has its own bound (validate.ReadLimits.max_json_bytes)
        with validate.open_gzip(path) if gz else open(path, "rb") as fh:
            return json.loads(validate.read_json_bytes(fh, str(path)).decode("utf-8"))
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TraceError(read_failure(exc), file=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise TraceError(f"not valid JSON: {exc}", file=str(path)) from exc


@dataclass
class RankFile:
    """One rank's profiler output, reduced to the columns the reader needs."""

    path: Path
    rank: int
    world_size: int | None
    pg_config: list[dict[str, Any]]
    # complete ('X') events as parallel arrays
    name: npt.NDArray[np.object_]
    cat: npt.NDArray[np.str_]
    tid: npt.NDArray[np.object_]
    ts: npt.NDArray[np.float64]  # seconds since ``origin``
    dur: npt.NDArray[np.float64]  # seconds
    args: LazyArgs
    origin: float = 0.0  # absolute (Unix epoch) seconds of ts == 0
    name_codes: tuple[npt.NDArray[np.str_], npt.NDArray[np.intp]] | None = None  # np.unique cache
    steps: list[tuple[int, float, float]] = field(default_factory=list)  # (N, start, end) as ts


def _rank_from_name(path: Path) -> int | None:
    m = RANK_IN_NAME_RE.search(path.name)
    return int(m.group(1)) if m else None


class LazyArgs:
    """Per-event ``args`` dicts decoded on first access (most events' args are never read: the
    readers look at runtime calls, kernels and a few annotations only)."""

    def __init__(self, raw: list[msgspec.Raw]) -> None:
        self._raw = raw
        self._done: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._raw)

    def __getitem__(self, index: SupportsIndex) -> dict[str, Any]:
        i = operator.index(index)
        got = self._done.get(i)
        if got is None:
            val = _JSON_DECODER.decode(self._raw[i])
            got = val if isinstance(val, dict) else {}
            self._done[i] = got
        return got


class _KeyArgs(msgspec.Struct, gc=False):
    """The two ``args`` keys every event's join needs, decoded for all events in one call."""

    correlation: Any = None
    external: Any = msgspec.field(default=None, name="External id")


_KEY_DECODER = msgspec.json.Decoder(list[_KeyArgs | None])


class _NumKeyArgs(msgspec.Struct, gc=False):
    """The same two keys typed as numbers (NaN where absent): the decoder converts them itself."""

    correlation: float = float("nan")
    external: float = msgspec.field(default=float("nan"), name="External id")


_NUM_KEY_DECODER = msgspec.json.Decoder(list[_NumKeyArgs | None])
_NO_KEYS = _NumKeyArgs()


def key_columns(args: LazyArgs) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per event: ``args.correlation`` and ``args["External id"]`` (NaN where absent), from one
    batched decode of every event's raw ``args`` (no dict per event). Numbers decode typed; a
    trace with a non-numeric value there (or an ``args`` that is not an object) takes the
    untyped decode, where such values count as absent."""
    raw = args._raw
    if not raw:
        return np.zeros(0), np.zeros(0)
    joined = b"[" + b",".join(raw) + b"]"
    try:
        typed = [a or _NO_KEYS for a in _NUM_KEY_DECODER.decode(joined)]
        n = len(typed)
        return (np.fromiter(map(operator.attrgetter("correlation"), typed), np.float64, n),
                np.fromiter(map(operator.attrgetter("external"), typed), np.float64, n))
    except msgspec.ValidationError:
        pass
    try:
        got = _KEY_DECODER.decode(joined)
    except msgspec.ValidationError:  # an args that is not an object: fall back per event
        got = [_KeyArgs(a.get("correlation"), a.get("External id"))
               for a in (args[i] for i in range(len(raw)))]
    nan = float("nan")
    corr = np.array([a.correlation if a is not None and type(a.correlation) in (int, float) else nan
                     for a in got], dtype=np.float64)
    ext = np.array([a.external if a is not None and type(a.external) in (int, float) else nan
                    for a in got], dtype=np.float64)
    return corr, ext


class _Event(msgspec.Struct, gc=False):
    """The fields of a trace event the reader uses; others are skipped by the decoder."""

    ph: Any = None
    name: Any = ""
    cat: Any = ""
    ts: Any = None
    dur: Any = 0.0
    tid: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None


_JSON_DECODER = msgspec.json.Decoder()
_DOC_DECODER = msgspec.json.Decoder(_Doc)
_LIST_DECODER = msgspec.json.Decoder(list[_Event])


def _read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped when gzipped; every layer counts against the read's
    decompression budget and the document against its own bound (validate.ReadLimits)."""
    try:
        with open(path, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        with validate.open_gzip(path) if gz else open(path, "rb") as fh:
            return validate.read_json_bytes(fh, str(path))
    except (OSError, EOFError) as exc:
        raise TraceError(read_failure(exc), file=str(path)) from exc


def _decode_events(path: Path) -> tuple[list[_Event], dict[str, Any]]:
    """The trace's events (typed, ``args`` left undecoded) and its top-level keys.

    msgspec decodes straight into small structs instead of one dict per event: about twice as
    fast as ``json.loads`` and a fraction of its memory (see docs/PERFORMANCE.md)."""
    data = _read_bytes(path)
    head = data[:256].lstrip(b"\xef\xbb\xbf \t\r\n")
    try:
        if head[:1] == b"[":
            return _LIST_DECODER.decode(data), {}
        doc = _DOC_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(f"not a PyTorch profiler (Kineto) trace: {exc}", file=str(path)) from exc
    except msgspec.DecodeError as exc:
        raise TraceError(f"not valid JSON: {exc}", file=str(path)) from exc
    if doc.traceEvents is None:
        raise TraceError("no 'traceEvents' list: not a PyTorch profiler (Kineto) trace", file=str(path))
    top = {"distributedInfo": doc.distributedInfo, "baseTimeNanoseconds": doc.baseTimeNanoseconds}
    return doc.traceEvents, top


def parse_file(path: Path, fallback_rank: int) -> RankFile:
    """Read one per-rank trace: rank info, complete events in seconds, and step windows."""
    events, doc = _decode_events(path)
    dinfo = validate.distributed_info(doc, str(path))
    rank = dinfo.get("rank")
    if not isinstance(rank, int):
        named = _rank_from_name(path)
        rank = named if named is not None else fallback_rank
    world = dinfo.get("world_size")
    world = int(world) if isinstance(world, int) and world > 0 else None
    pg_config = [g for g in dinfo.get("pg_config") or [] if isinstance(g, dict)]

    xs = [e for e in events if e.ph == "X" and e.ts is not None]
    n = len(xs)
    validate.take_ops(n, str(path))
    # one comprehension per field: several times faster than filling arrays event by event
    # names and categories dictionary-encoded: traces repeat a few thousand names, so one string
    # object per distinct name and integer codes make masks and np.unique cheap
    name_code: dict[Any, int] = {}
    codes = np.fromiter((name_code.setdefault(e.name, len(name_code)) for e in xs), dtype=np.int64,
                        count=n)
    uniq_names = np.empty(len(name_code), dtype=object)
    uniq_names[:] = [k if type(k) is str else str(k) for k in name_code]
    name = uniq_names[codes]
    cat_code: dict[Any, int] = {}
    ccodes = np.fromiter((cat_code.setdefault(e.cat, len(cat_code)) for e in xs), dtype=np.int64, count=n)
    uniq_cats = np.array([_CAT_ALIASES.get(c, c) for c in (str(k) for k in cat_code)] or [""], dtype=str)
    cat = uniq_cats[ccodes] if n else np.zeros(0, dtype=str)
    tid = np.empty(n, dtype=object)
    tid[:] = [e.tid for e in xs]
    args = LazyArgs([e.args for e in xs])
    try:
        ts = np.array([e.ts for e in xs], dtype=np.float64)
        dur = np.array([0.0 if e.dur is None else e.dur for e in xs], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"event with a non-numeric ts/dur: {exc}", file=str(path), rank=rank) from exc
    base_ns = doc.get("baseTimeNanoseconds")
    # Newer traces count ts from baseTimeNanoseconds; older ones hold absolute epoch µs (> 1e14).
    # Times are kept relative to the file's first event so that durations derived from them
    # (busy time) keep sub-µs precision; ``origin`` holds the absolute epoch second of that event.
    first = float(np.nanmin(ts)) if n else 0.0
    origin = first / 1e6
    if isinstance(base_ns, int | float) and n and float(np.nanmax(ts)) < 1e14:
        origin = float(base_ns) / 1e9 + first / 1e6
    rf = RankFile(path, int(rank), world, pg_config, name, cat, tid, (ts - first) / 1e6, dur / 1e6, args,
                  origin=origin, name_codes=(uniq_names.astype(str), codes))
    seen: dict[int, tuple[float, float]] = {}
    for j in np.flatnonzero((cat == "user_annotation") | (cat == "cpu_op")):
        m = STEP_RE.fullmatch(str(name[j]).strip())
        if m:
            k = int(m.group(1))
            t0, t1 = float(rf.ts[j]), float(rf.ts[j] + rf.dur[j])
            if k in seen:
                t0, t1 = min(t0, seen[k][0]), max(t1, seen[k][1])
            seen[k] = (t0, t1)
    rf.steps = sorted((k, s, e) for k, (s, e) in seen.items())
    return rf


# ----------------------------------------------------------------------------------------------
# Coordinates


@dataclass
class Layout:
    """Job sizes and, per traced rank, its (dp_rank, stage) or None when it is dropped (TP/CP > 0)."""

    dp: int
    pp: int
    tp: int
    cp: int
    world_size: int
    coords: dict[int, tuple[int, int] | None]
    source: str


# Megatron-core's group descriptions (parallel_state.py), matched exactly: it also creates mixed
# groups such as TENSOR_AND_DATA_PARALLEL_GROUP or DATA_PARALLEL_GROUP_WITH_CP that must not count.
MEGATRON_GROUPS: dict[str, str] = {
    "DATA_PARALLEL_GROUP": "dp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "CONTEXT_PARALLEL_GROUP": "cp",
}
# Short names a user may give (dp, dp_stage0, pp-1, tp3, ...).
SHORT_GROUP_RE = re.compile(r"^(dp|pp|tp|cp)(?:[_\-.]|\d|$)", re.IGNORECASE)


def _group_kind(desc: str) -> str | None:
    """Which parallel dimension a ``pg_config`` group description names, if any."""
    kind = MEGATRON_GROUPS.get(desc.strip().upper())
    if kind:
        return kind
    m = SHORT_GROUP_RE.match(desc.strip())
    return m.group(1).lower() if m else None


def layout_from(files: Sequence[RankFile], options: ReadOptions) -> Layout:
    """Parallel sizes and worker coordinates: ``pg_config`` first, then options, then pure DP."""
    worlds = {f.world_size for f in files if f.world_size}
    if len(worlds) > 1:
        raise TraceError(f"files disagree on distributedInfo.world_size: {sorted(worlds)}")
    ranks = [f.rank for f in files]
    dup = [r for r, c in Counter(ranks).items() if c > 1]
    if dup:
        paths = [str(f.path) for f in files if f.rank == dup[0]]
        raise TraceError(f"rank {dup[0]} appears in several files: {', '.join(paths)}", rank=dup[0])
    # Group membership per kind, from every file's pg_config (each lists only its own groups).
    member: dict[str, dict[int, list[int]]] = {"dp": {}, "pp": {}, "tp": {}, "cp": {}}
    for f in files:
        for g in f.pg_config:
            kind = _group_kind(str(g.get("pg_desc") or g.get("uid") or ""))
            grp = g.get("ranks")
            if kind and isinstance(grp, list) and f.rank in grp:
                member[kind][f.rank] = sorted(int(r) for r in grp)
    sizes: dict[str, int | None] = {}
    from_pg = []
    for kind in ("dp", "pp", "tp", "cp"):
        found = {len(g) for g in member[kind].values()}
        if len(found) > 1:
            raise TraceError(f"pg_config {kind.upper()} groups have different sizes: {sorted(found)}")
        opt = getattr(options, kind)
        if found:
            sizes[kind] = found.pop()
            from_pg.append(kind)
            if opt is not None and opt != sizes[kind]:
                raise TraceError(
                    f"--{kind} {opt} contradicts the trace's pg_config ({kind.upper()} groups of size "
                    f"{sizes[kind]})"
                )
        else:
            sizes[kind] = opt
    world = worlds.pop() if worlds else None
    tp, cp = sizes["tp"] or 1, sizes["cp"] or 1
    if world is None:
        known = [sizes[k] for k in ("dp", "pp")]
        world = (
            (sizes["dp"] or 1) * (sizes["pp"] or 1) * tp * cp
            if all(k is not None for k in known)
            else max(max(ranks) + 1, len(ranks))
        )
    pp = sizes["pp"]
    dp = sizes["dp"]
    if dp is None and pp is None:
        pp = 1
    if dp is None:
        assert pp is not None
        dp = world // (pp * tp * cp) if world % (pp * tp * cp) == 0 else 0
    elif pp is None:
        pp = world // (dp * tp * cp) if world % (dp * tp * cp) == 0 else 0
    if not dp or not pp or dp * pp * tp * cp != world:
        given = " x ".join(f"{k} {v}" for k, v in (("dp", dp), ("pp", pp), ("tp", tp), ("cp", cp)) if v)
        raise TraceError(
            f"the trace's world size {world} does not split into {given}"
            f"{' x the rest' if not dp or not pp else ''}; check --dp/--pp/--tp/--cp"
        )
    coords: dict[int, tuple[int, int] | None] = {}
    for r in ranks:
        if not 0 <= r < world:
            raise TraceError(f"rank {r} is outside world size {world}", rank=r)
        # Megatron's default order: TP fastest, then CP, DP, PP slowest.
        t = r % tp
        c = (r // tp) % cp
        d = (r // (tp * cp)) % dp
        s = r // (tp * cp * dp)
        if r in member["tp"]:
            t = member["tp"][r].index(r)
        if r in member["cp"]:
            c = member["cp"][r].index(r)
        if r in member["dp"]:
            d = member["dp"][r].index(r)
        if r in member["pp"]:
            s = member["pp"][r].index(r)
        coords[r] = (d, s) if t == 0 and c == 0 else None
    if from_pg:
        source = "pg_config (" + ", ".join(k.upper() for k in from_pg) + " groups)"
    elif any(getattr(options, k) is not None for k in ("dp", "pp", "tp", "cp")):
        source = "--dp/--pp/--tp/--cp or the meta yaml, with Megatron rank order"
    else:
        source = "no layout given: pure data parallel, dp = world size"
    return Layout(dp, pp, tp, cp, world, coords, source)


# ----------------------------------------------------------------------------------------------
# Op extraction


@dataclass
class RawOps:
    """Raw op rows (names not yet mapped) for one rank."""

    step: list[int] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    start: list[float] = field(default_factory=list)
    dur: list[float] = field(default_factory=list)

    def add(self, step: int, name: str, start: float, dur: float) -> None:
        self.step.append(step)
        self.name.append(name)
        self.start.append(start)
        self.dur.append(dur)


def _step_of(f: RankFile, t: npt.NDArray[np.float64], extend: bool) -> npt.NDArray[np.int64]:
    """Index into ``f.steps`` of the window holding each time, -1 outside.

    With ``extend`` a window reaches to the next step's start (device work lags its launch).
    """
    if not f.steps:
        return np.zeros(len(t), dtype=np.int64)
    starts = np.array([s for _, s, _ in f.steps])
    ends = np.array([e for _, _, e in f.steps])
    idx = np.searchsorted(starts, t, side="right") - 1
    ok = idx >= 0
    if not extend:
        ok &= t <= ends[np.clip(idx, 0, None)]
    return np.where(ok, idx, -1)


def _step_ids(f: RankFile) -> list[int]:
    return [k for k, _, _ in f.steps] if f.steps else [0]


def modelled_names(f: RankFile, cats: Iterable[str]) -> Counter[str]:
    """Annotation names of the given categories that the op-name table knows (not IGNORED)."""
    mask = np.isin(f.cat, list(cats))
    c: Counter[str] = Counter()
    for nm in f.name[mask]:
        k = classify_name(nm)
        if k in (NameClass.MODELLED, NameClass.BATCHED, NameClass.ALIAS):
            c[nm] += 1
    return c


def named_ops(f: RankFile, cat: str) -> RawOps:
    """Spans of category ``cat`` whose names are in the op-name table, by step."""
    out = RawOps()
    mask = f.cat == cat
    idx = np.flatnonzero(mask)
    steps = _step_of(f, f.ts[idx], extend=cat != "user_annotation")
    ids = _step_ids(f)
    for i, si in zip(idx, steps, strict=True):
        nm = str(f.name[i])
        if si < 0 or classify_name(nm) is NameClass.UNKNOWN:
            continue
        out.add(ids[si], nm, float(f.ts[i]), float(f.dur[i]))
    return out


def _busy(starts: npt.NDArray[np.float64], ends: npt.NDArray[np.float64]) -> float:
    """Length of the union of intervals (streams and threads may overlap)."""
    if len(starts) == 0:
        return 0.0
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    # a new block starts where an interval begins after everything before it has ended
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    block = np.cumsum(new) - 1
    bstart = s[new]
    bend = np.zeros(int(block[-1]) + 1)
    np.maximum.at(bend, block, e)
    return float(np.sum(bend - bstart))


def _name_mask(f: RankFile, pred: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
    """``pred`` over event names, evaluated once per distinct name (traces repeat a few names)."""
    if f.name_codes is None:
        uniq, inv = np.unique(f.name.astype(str), return_inverse=True)
        f.name_codes = (uniq, inv.reshape(-1))
    uniq, inv = f.name_codes
    return np.fromiter((pred(str(u)) for u in uniq), dtype=bool, count=len(uniq))[inv]


def plain_ops(f: RankFile, notes: set[str]) -> RawOps:
    """Forward / backward / optimizer compute and DP-synced collectives of a trace without timer names."""
    out = RawOps()
    cat = f.cat
    ids = _step_ids(f)
    n_steps = len(ids)
    # --- phase boundaries per step, from CPU-side evidence
    ann = np.isin(cat, ["user_annotation", "cpu_op"])
    bwd_mask = ann & _name_mask(
        f, lambda x: bool(BACKWARD_ANNOTATION_RE.search(x)) or x.startswith(AUTOGRAD_PREFIX)
    )
    opt_mask = ann & _name_mask(f, lambda x: bool(OPTIMIZER_ANNOTATION_RE.search(x)))
    b0 = np.full(n_steps, np.inf)
    o0 = np.full(n_steps, np.inf)
    for mask, arr in ((bwd_mask, b0), (opt_mask, o0)):
        idx = np.flatnonzero(mask)
        st = _step_of(f, f.ts[idx], extend=False)
        ok = st >= 0
        np.minimum.at(arr, st[ok], f.ts[idx][ok])
    has_bwd = np.isfinite(b0)
    if not has_bwd.all():
        notes.add(
            "no backward annotation or autograd op in some steps: their compute is read as "
            "forward-compute and their collectives as grads-reduce-scatter"
        )

    def phase(step_idx: npt.NDArray[np.int64], t: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        p = np.zeros(len(t), dtype=np.int64)
        p[t >= b0[step_idx]] = _BWD
        p[t >= o0[step_idx]] = _OPT
        return p

    kernel = cat == "kernel"
    comm_kernel = kernel & _name_mask(f, lambda x: bool(COMM_KERNEL_RE.search(x)))
    use_gpu = bool(kernel.any())
    if use_gpu:
        # Launch time of each kernel: the CPU runtime call with the same correlation id.
        launch: dict[Any, float] = {}
        for i in np.flatnonzero(np.isin(cat, ["cuda_runtime", "cuda_driver", "runtime"])):
            c = f.args[i].get("correlation")
            if c is not None:
                launch[c] = float(f.ts[i])
        kidx = np.flatnonzero(kernel)
        t_launch = np.array([launch.get(f.args[i].get("correlation"), f.ts[i]) for i in kidx])
        ksteps = _step_of(f, t_launch, extend=False)
        keep = ksteps >= 0
        kidx, t_launch, ksteps = kidx[keep], t_launch[keep], ksteps[keep]
        kphase = phase(ksteps, t_launch)
        is_comm = comm_kernel[kidx]
        comp_idx, comp_step, comp_phase = kidx[~is_comm], ksteps[~is_comm], kphase[~is_comm]
        coll_idx, coll_step, coll_phase = kidx[is_comm], ksteps[is_comm], kphase[is_comm]
        # Kernel names mislead (all_to_all runs as SendRecv): prefer the collective args.
        labels = []
        for i in coll_idx:
            a = f.args[i]
            op = a.get("Collective name")
            if op is None:
                m = KERNEL_OP_RE.search(str(f.name[i]))
                op = m.group(1) if m else str(f.name[i])[:40]
            group = a.get("Process Group Description") or a.get("Process Group Name")
            labels.append(f"{op} on {group}" if group else str(op))
        p2p = np.array([str(f.args[i].get("Collective name", "")).lower() in P2P_COLLECTIVE_NAMES
                        for i in coll_idx], dtype=bool)
        if p2p.any():
            notes.add(
                f"rank {f.rank}: skipped {int(p2p.sum())} point-to-point NCCL kernels (send/recv): "
                "pipeline stages need record_function spans with the P2P names"
            )
        counts = Counter(lab for lab, skip in zip(labels, p2p, strict=True) if not skip)
        notes.add("collectives read as DP-synced ops: "
                  + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
        coll_idx, coll_step, coll_phase = coll_idx[~p2p], coll_step[~p2p], coll_phase[~p2p]
        notes.add(
            "plain data-parallel trace: compute = busy time of non-NCCL GPU kernels per phase "
            "(forward / backward / optimizer); each NCCL kernel is a DP-synced collective, "
            "params-all-gather in the forward phase, grads-reduce-scatter otherwise"
        )
    else:
        cpu = cat == "cpu_op"
        noncomp = _name_mask(f, lambda x: x.startswith(NON_COMPUTE_CPU_PREFIXES))
        comp_idx = np.flatnonzero(cpu & ~noncomp)
        comp_step = _step_of(f, f.ts[comp_idx], extend=False)
        ok = comp_step >= 0
        comp_idx, comp_step = comp_idx[ok], comp_step[ok]
        comp_phase = phase(comp_step, f.ts[comp_idx])
        collm = (cat == "user_annotation") & _name_mask(
            f, lambda x: x.startswith(COMM_CPU_PREFIXES) and x not in P2P_CPU_NAMES
        )
        n_p2p = int(((cat == "user_annotation") & _name_mask(f, lambda x: x in P2P_CPU_NAMES)).sum())
        if n_p2p:
            notes.add(
                f"rank {f.rank}: skipped {n_p2p} point-to-point gloo/nccl send/recv spans: pipeline "
                "stages need record_function spans with the P2P names"
            )
        coll_idx = np.flatnonzero(collm)
        coll_step = _step_of(f, f.ts[coll_idx], extend=False)
        ok = coll_step >= 0
        coll_idx, coll_step = coll_idx[ok], coll_step[ok]
        coll_phase = phase(coll_step, f.ts[coll_idx])
        notes.add(
            "plain data-parallel CPU trace: compute = busy time of CPU ops per phase (forward / "
            "backward / optimizer); each gloo:*/nccl:* annotation is a DP-synced collective, "
            "params-all-gather in the forward phase, grads-reduce-scatter otherwise"
        )
    ends = f.ts + f.dur
    for si in range(n_steps):
        prev_end: float | None = None
        for ph in (_FWD, _BWD, _OPT):
            sel = comp_idx[(comp_step == si) & (comp_phase == ph)]
            if len(sel):
                start = float(f.ts[sel].min())
                busy = _busy(f.ts[sel], ends[sel])
            else:
                # an empty phase still gets its (zero-length) op: every rank carries the same ops
                start = prev_end if prev_end is not None else (f.steps[si][1] if f.steps else 0.0)
                busy = 0.0
            out.add(ids[si], _PHASE_COMPUTE[ph], start, busy)
            prev_end = start + busy
        sel_c = (coll_step == si)
        for i, ph in zip(coll_idx[sel_c], coll_phase[sel_c], strict=True):
            # without phase evidence a collective is most likely the gradient all-reduce
            slot = "params-all-gather" if ph == _FWD and has_bwd[si] else "grads-reduce-scatter"
            out.add(ids[si], slot, float(f.ts[i]), float(f.dur[i]))
    return out


def _describe_names(files: Sequence[RankFile]) -> str:
    c: Counter[str] = Counter()
    for f in files:
        c.update(str(x) for x in f.name[np.isin(f.cat, ["user_annotation", "gpu_user_annotation"])])
    if not c:
        return "no user annotations at all"
    return "user annotations found: " + ", ".join(f"{n!r}" for n, _ in c.most_common(12))


_RECV_FORWARD = ("forward-recv", "backward-send-forward-recv", "forward-send-forward-recv")


def _infer_pipeline(files: Sequence[RankFile], options: ReadOptions, layout: Layout) -> Layout:
    """A pipeline layout from named P2P spans when nothing else gave one.

    Ranks that never receive activations (no ``forward-recv`` or batched recv) are the first stage;
    with Megatron's rank order they are ranks ``0 .. dp*tp*cp - 1``. Returns ``layout`` unchanged
    when there are no P2P spans or the guess does not fit the world size.
    """
    named = [modelled_names(f, ["user_annotation", "gpu_user_annotation"]) for f in files]
    if not any(classify_name(n) is NameClass.BATCHED or n in P2P_NAMES for c in named for n in c):
        return layout
    first = sorted(
        f.rank for f, c in zip(files, named, strict=True) if not any(n in c for n in _RECV_FORWARD)
    )
    per_stage = len(first)
    if not per_stage or first != list(range(per_stage)) or layout.world_size % per_stage:
        return layout
    pp = layout.world_size // per_stage
    dp = per_stage // (layout.tp * layout.cp) if per_stage % (layout.tp * layout.cp) == 0 else 0
    if pp < 2 or not dp:
        return layout
    try:
        guessed = layout_from(files, ReadOptions(dp=dp, pp=pp, tp=options.tp, cp=options.cp))
    except TraceError:
        return layout
    guessed.source = (
        f"named P2P spans: ranks {int_ranges(first)} never receive activations, so they are stage 0 "
        "(Megatron rank order assumed; name the process groups or pass --pp to be sure)"
    )
    return guessed


def collect(paths: Sequence[Path], options: ReadOptions) -> tuple[dict[str, Any], JobMeta, list[str]]:
    """Parse the files into raw op columns (names not yet mapped), job meta and notes."""
    columns, meta, notes, _graph = collect_job(paths, options)
    return columns, meta, notes


def collect_job(
    paths: Sequence[Path], options: ReadOptions
) -> tuple[dict[str, Any], JobMeta, list[str], ExplicitGraph | None]:
    """:func:`collect` plus the explicit dependency graph of the kernel-level model (None for the
    named-span and phase models)."""
    if not paths:
        raise TraceError("no Kineto trace files given")
    files = [parse_file(p, i) for i, p in enumerate(paths)]
    notes: list[str] = []
    layout = layout_from(files, options)
    if layout.pp == 1 and options.pp is None:
        layout = _infer_pipeline(files, options, layout)
    notes.append(f"layout dp={layout.dp} pp={layout.pp} tp={layout.tp} cp={layout.cp} from {layout.source}")
    dropped = [f.rank for f in files if layout.coords[f.rank] is None]
    kept = [f for f in files if layout.coords[f.rank] is not None]
    if dropped:
        notes.append(f"dropped {len(dropped)} ranks with TP or CP rank > 0 (TP/CP are collapsed)")
    cells = {layout.coords[f.rank] for f in kept}
    want = layout.dp * layout.pp
    partial = bool(options.extra.get("partial"))
    if len(cells) < want:
        present = sorted(f.rank for f in files)
        if not partial:
            raise TraceError(
                f"the job has world size {layout.world_size} ({want} DP x PP workers) but only "
                f"{len(present)} rank file(s) were given (ranks {int_ranges(present)}); a what-if analysis "
                "needs one trace per DP x PP worker: pass every rank's file (or read the subset as a "
                "smaller job with ReadOptions(extra={'partial': True}))"
            )
        # Analyse the traced subset as a smaller pure-DP job.
        notes.append(
            f"partial job: {len(present)} of {layout.world_size} ranks traced; analysed as a "
            f"{len(kept)}-rank data-parallel job (collectives still waited for untraced ranks)"
        )
        kept = sorted(kept, key=lambda f: f.rank)
        layout.coords = {f.rank: (i, 0) for i, f in enumerate(kept)}
        layout.dp, layout.pp = len(kept), 1
    if not any(f.steps for f in kept):
        notes.append("no ProfilerStep#N markers: each file is read as one step (step 0)")

    # Mode: named spans (GPU-side copies preferred), else plain DP.
    gpu_named = [modelled_names(f, ["gpu_user_annotation"]) for f in kept]
    cpu_named = [modelled_names(f, ["user_annotation"]) for f in kept]
    per_rank: list[tuple[RankFile, RawOps]] = []
    if any(gpu_named) or any(cpu_named):
        cat = "gpu_user_annotation" if all(gpu_named) else "user_annotation"
        names_found = gpu_named if cat == "gpu_user_annotation" else cpu_named
        for f, found in zip(kept, names_found, strict=True):
            have = {str(n) for n in found}
            need = {"forward-compute", "backward-compute"}
            if not need <= have:
                raise TraceError(
                    f"expected record_function spans named {sorted(need)} (Megatron/NDTimeline names) "
                    f"but found only {sorted(have) or 'none'} among them; "
                    + _describe_names([f]),
                    file=str(f.path),
                    rank=f.rank,
                )
            per_rank.append((f, named_ops(f, cat)))
        notes.append("job model: named spans (record_function spans with Megatron/NDTimeline names "
                     "found): the Megatron dependency model")
        notes.append(
            f"ops from record_function spans with Megatron/NDTimeline names ({cat}); "
            "gloo/NCCL events inside them are not counted separately"
        )
        if cat == "user_annotation" and any((f.cat == "kernel").any() for f in kept):
            notes.append(
                "the named spans are CPU-side but the trace has GPU kernels: on an asynchronous "
                "GPU job they time kernel launches, not execution (record on the GPU side, e.g. "
                "with gpu_user_annotation, or synchronise inside the spans)"
            )
        other: Counter[str] = Counter()
        for f in kept:
            for nm in f.name[f.cat == cat]:
                if classify_name(nm) is NameClass.UNKNOWN and not STEP_RE.fullmatch(nm.strip()):
                    other[nm] += 1
        if other:
            notes.append(
                f"not modelled, left out: {sum(other.values())} other {cat} spans ("
                + ", ".join(f"{n!r} x{c}" for n, c in other.most_common(6))
                + (", ..." if len(other) > 6 else "")
                + ")"
            )
    else:
        if layout.pp > 1:
            # without named P2P spans nothing links one stage to the next: each would be simulated
            # as an independent job, and the report would look plausible and mean nothing
            raise TraceError(
                f"the layout has pp={layout.pp} ({layout.source}) but the trace has no "
                "record_function spans with the Megatron/NDTimeline names, so pipeline stages cannot "
                "be linked (stage boundaries are not recoverable from kernels); a plain data-parallel "
                "trace needs pp = 1; " + _describe_names(kept)
            )
        kernel = None if options.extra.get("kineto_model") == "phases" else _kernel_level(
            kept, layout, options, notes)
        if kernel is not None:
            return kernel
        notes.append("job model: phases (forward / backward / optimizer per step; "
                     + ("asked for" if options.extra.get("kineto_model") == "phases"
                        else "the kernel-level model could not be used") + ")")
        note_set: set[str] = set()
        per_rank = [(f, plain_ops(f, note_set)) for f in kept]
        notes.extend(sorted(note_set))
        if not any(
            n in ("params-all-gather", "grads-reduce-scatter") for _, o in per_rank for n in o.name
        ):
            any_compute = any(d > 0 for _, o in per_rank for d in o.dur)
            if not any_compute:
                raise TraceError(
                    "no operations found: expected record_function spans with Megatron/NDTimeline "
                    "names (forward-compute, backward-compute, forward-send, grads-reduce-scatter, "
                    "optimizer, ...), or DP phase annotations (## forward ##, ## backward ##, "
                    "## optimizer ##) with GPU kernels or CPU ops; " + _describe_names(kept)
                )
    # Keep the steps every kept rank has.
    common = set.intersection(*(set(o.step) for _, o in per_rank)) if per_rank else set()
    all_steps = set().union(*(set(o.step) for _, o in per_rank)) if per_rank else set()
    if not common:
        raise TraceError(
            "the rank files share no profiled step (ProfilerStep#N): "
            + "; ".join(f"rank {f.rank}: {sorted(set(o.step))}" for f, o in per_rank)
        )
    if all_steps - common:
        notes.append(f"dropped steps not profiled on every rank: {sorted(all_steps - common)}")
    keys = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration")
    cols: dict[str, list[Any]] = {k: [] for k in keys}
    for f, o in per_rank:
        coord = layout.coords[f.rank]
        assert coord is not None
        for s, nm, st, du in zip(o.step, o.name, o.start, o.dur, strict=True):
            if s not in common:
                continue
            cols["dp_rank"].append(coord[0])
            cols["stage"].append(coord[1])
            cols["rank"].append(f.rank)
            cols["step"].append(s)
            cols["optype"].append(nm)
            cols["start_ts"].append(st + f.origin)
            cols["duration"].append(du)
    columns: dict[str, Any] = columns_from_lists(cols)
    meta_kw: dict[str, Any] = {
        k: v for k, v in options.overrides().items() if k not in ("dp", "pp", "tp", "cp")
    }
    meta = JobMeta(
        dp=layout.dp,
        pp=layout.pp,
        tp=layout.tp if not partial else 1,
        cp=layout.cp if not partial else 1,
        source_format="kineto",
        **meta_kw,
    )
    return columns, meta, notes, None


def _kernel_level(
    kept: Sequence[RankFile], layout: Layout, options: ReadOptions, notes: list[str]
) -> tuple[dict[str, Any], JobMeta, list[str], ExplicitGraph] | None:
    """The kernel-level model (:mod:`diagnosers.readers.kineto_kernels`) of a trace without named
    spans, or None (with a note) when the ranks do not share one kernel structure, so the phase
    model is used instead."""
    rank_steps = []
    for f in kept:
        rs = kineto_kernels.gpu_rank_steps(f)
        rank_steps.append(rs if rs is not None else kineto_kernels.cpu_rank_steps(f))
    step_ids = {f.rank: _step_ids(f) for f in kept}
    common = set.intersection(*(set(v) for v in step_ids.values()))
    if not common:
        raise TraceError(
            "the rank files share no profiled step (ProfilerStep#N): "
            + "; ".join(f"rank {r}: {v}" for r, v in sorted(step_ids.items()))
        )
    coords = {f.rank: layout.coords[f.rank] for f in kept}
    try:
        cols, graph, knotes = kineto_kernels.build(
            rank_steps, step_ids, {r: c for r, c in coords.items() if c is not None},
            {f.rank: f.origin for f in kept}, common)
    except TraceError as exc:
        notes.append(f"kernel-level model not used ({exc}); falling back to forward / backward / "
                     "optimizer phases")
        return None
    all_steps = set().union(*(set(v) for v in step_ids.values()))
    if all_steps - common:
        notes.append(f"dropped steps not profiled on every rank: {sorted(all_steps - common)}")
    notes.append(
        f"job model: {graph.model} ({graph.why}): per rank, GPU kernels (or CPU ops) in launch "
        "order grouped into compute segments between collectives, collectives matched across ranks, "
        "dependencies from stream order, stream waits and synchronisations"
    )
    notes.extend(knotes)
    columns: dict[str, Any] = columns_from_lists(cols)
    columns["seq_id"] = np.asarray(cols["seq_id"], dtype=np.int64)
    meta_kw: dict[str, Any] = {
        k: v for k, v in options.overrides().items() if k not in ("dp", "pp", "tp", "cp")
    }
    meta = JobMeta(dp=layout.dp, pp=1, tp=layout.tp, cp=layout.cp, source_format="kineto", **meta_kw)
    return columns, meta, notes, graph


def read(paths: list[Path], options: ReadOptions) -> Trace:
    """Read one job's per-rank Kineto traces into a validated ``Trace``.

    A meta yaml (``--meta`` or among the paths) fills the job keys the options leave open."""
    from diagnosers.readers.artifact import options_with_meta
    from diagnosers.readers.normalize import normalize

    options = options_with_meta(options)
    columns, meta, notes, graph = collect_job(paths, options)
    source = str(paths[0]) if len(paths) == 1 else f"{paths[0].parent} ({len(paths)} Kineto files)"
    trace = normalize(columns, meta, source=source, strict_names=True)
    trace.notes = notes + trace.notes
    trace.graph = graph
    return trace
