"""The fleet study's plumbing without Ray: job sources, content hashes, the per-job sandbox, the
results folder.

- ``resolve_sources(sources)``: job folders, globs (each match one job) and manifests (CSV or JSON
  Lines) into ``FleetJobSource`` entries, each with its trace files and optional meta, GPU count,
  wall-clock duration, team and per-job limits.
- ``content_hash(job)``: SHA-256 over the job's trace and meta bytes (names and contents), so a
  rerun can skip what is already analysed.
- ``run_isolated(job, timeout_s, memory_mb)``: analyses one job in a child process forked from a
  per-process fork server, with ``RLIMIT_AS`` set inside the child to its address space at start
  plus ``memory_mb`` (Ray's ``memory=`` only schedules), killed at ``timeout_s``. Returns a result
  dict, never raises for the job's own failures: a bad trace, a memory overrun, a timeout or a
  crash of the child become ``status: failed`` with the reason.
- ``ResultStore``: ``OUT/jobs/<id>.json`` per job and the fleet outputs (``fleet.parquet``,
  ``report.json``, ``report.txt``, PNGs) written from all of them.

The analysis itself is ``diagnosers.fleet.analyse_job``; this module only validates, runs, stores.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import multiprocessing
import os
import re
import resource
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Files a job folder may hold besides its trace: the generator's ground truth and spec.
SIDECAR_NAMES = frozenset({"labels.json", "spec.json", "manifest.jsonl"})
MANIFEST_SUFFIXES = (".csv", ".jsonl", ".ndjson")
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MEMORY_MB = 4096
# A job id becomes a file name in OUT/jobs/.
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


class FleetSourceError(ValueError):
    """A source or manifest line that cannot become a job (says which file and line)."""


@dataclass
class FleetJobSource:
    """One job to analyse. ``paths`` are trace files; ``meta`` an optional meta yaml."""

    job_id: str
    paths: list[str]
    meta: str | None = None
    gpus: int | None = None
    duration_hours: float | None = None
    team: str | None = None
    timeout_s: float | None = None
    memory_mb: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _files_of_folder(folder: Path) -> tuple[list[str], str | None]:
    files = sorted(f for f in folder.iterdir()
                   if f.is_file() and not f.name.startswith(".") and f.name not in SIDECAR_NAMES)
    metas = [f for f in files if f.suffix.lower() in {".yaml", ".yml"}]
    data = [str(f) for f in files if f not in metas]
    if not data:
        raise FleetSourceError(f"{folder}: job folder holds no trace files")
    return data, str(metas[0]) if len(metas) == 1 else None


def _job_from_path(p: Path) -> FleetJobSource:
    if p.is_dir():
        data, meta = _files_of_folder(p)
        return FleetJobSource(job_id=p.name, paths=data, meta=meta)
    return FleetJobSource(job_id=p.stem, paths=[str(p)])


def _opt_int(v: Any, where: str, name: str) -> int | None:
    if v is None or v == "":
        return None
    try:
        out = int(v)
    except (TypeError, ValueError):
        raise FleetSourceError(f"{where}: {name} must be an integer, got {v!r}") from None
    if out < 1:
        raise FleetSourceError(f"{where}: {name} must be positive, got {out}")
    return out


def _opt_float(v: Any, where: str, name: str) -> float | None:
    if v is None or v == "":
        return None
    try:
        out = float(v)
    except (TypeError, ValueError):
        raise FleetSourceError(f"{where}: {name} must be a number, got {v!r}") from None
    if not out > 0:
        raise FleetSourceError(f"{where}: {name} must be positive, got {out}")
    return out


def _entry_to_job(entry: dict[str, Any], base: Path, where: str) -> FleetJobSource:
    job_id = str(entry.get("job_id") or entry.get("id") or "").strip()
    if not job_id:
        raise FleetSourceError(f"{where}: no job_id")
    raw = entry.get("paths", entry.get("trace_paths", entry.get("path")))
    if isinstance(raw, str):
        raw = [x for x in re.split(r"[;|]", raw) if x.strip()]
    if not raw or not isinstance(raw, list):
        raise FleetSourceError(f"{where}: job {job_id!r} has no trace paths")
    paths: list[str] = []
    for r in raw:
        p = Path(str(r).strip())
        p = p if p.is_absolute() else base / p
        if p.is_dir():
            data, meta_in = _files_of_folder(p)
            paths.extend(data)
            if not entry.get("meta"):
                entry["meta"] = meta_in
        else:
            paths.append(str(p))
    meta = entry.get("meta") or None
    if meta is not None:
        mp = Path(str(meta))
        meta = str(mp if mp.is_absolute() else base / mp)
    known = {"job_id", "id", "paths", "trace_paths", "path", "meta", "gpus", "duration_hours",
             "team", "timeout_s", "memory_mb"}
    return FleetJobSource(
        job_id=job_id,
        paths=paths,
        meta=meta,
        gpus=_opt_int(entry.get("gpus"), where, "gpus"),
        duration_hours=_opt_float(entry.get("duration_hours"), where, "duration_hours"),
        team=(str(entry["team"]) if entry.get("team") not in (None, "") else None),
        timeout_s=_opt_float(entry.get("timeout_s"), where, "timeout_s"),
        memory_mb=_opt_int(entry.get("memory_mb"), where, "memory_mb"),
        extra={k: v for k, v in entry.items() if k not in known},
    )


def read_manifest(path: str | Path) -> list[FleetJobSource]:
    """Jobs of a CSV or JSON Lines manifest. Columns/keys: ``job_id``, ``paths`` (a list, or one
    string split on ``;`` or ``|``), optional ``meta``, ``gpus``, ``duration_hours`` (wall clock),
    ``team``, ``timeout_s``, ``memory_mb``; other keys are kept as ``extra``. Relative paths are
    relative to the manifest's folder."""
    p = Path(path)
    base = p.parent
    jobs: list[FleetJobSource] = []
    if p.suffix.lower() == ".csv":
        with p.open(newline="", encoding="utf-8") as fh:
            for i, rec in enumerate(csv.DictReader(fh), start=2):
                jobs.append(_entry_to_job(dict(rec), base, f"{p}:{i}"))
    else:
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FleetSourceError(f"{p}:{i}: not JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise FleetSourceError(f"{p}:{i}: expected a JSON object per line")
            jobs.append(_entry_to_job(rec, base, f"{p}:{i}"))
    return jobs


def resolve_sources(sources: Sequence[str]) -> list[FleetJobSource]:
    """Every job named by ``sources`` (folders, globs, manifests), in order; job ids must be unique."""
    jobs: list[FleetJobSource] = []
    for src in sources:
        if any(ch in src for ch in "*?["):
            matches = sorted(glob.glob(src))
            if not matches:
                raise FleetSourceError(f"{src}: glob matched nothing")
            found = [_job_from_path(Path(m)) for m in matches]
            stems = [j.job_id for j in found]
            for j, m in zip(found, matches, strict=True):
                if stems.count(j.job_id) > 1:  # e.g. */trace.parquet: name the job by its folder
                    j.job_id = f"{Path(m).parent.name}/{j.job_id}"
            jobs.extend(found)
            continue
        p = Path(src)
        if not p.exists():
            raise FleetSourceError(f"{src}: no such file or folder")
        if p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES:
            jobs.extend(read_manifest(p))
        else:
            jobs.append(_job_from_path(p))
    seen: set[str] = set()
    for j in jobs:
        if j.job_id in seen:
            raise FleetSourceError(f"job id {j.job_id!r} appears twice among the sources")
        seen.add(j.job_id)
    return jobs


def content_hash(job: FleetJobSource) -> str:
    """SHA-256 over each trace file's and the meta file's name and bytes; a missing file hashes as
    its name only (its analysis then fails and is not skipped on a rerun)."""
    h = hashlib.sha256()
    files = sorted(job.paths) + ([job.meta] if job.meta else [])
    for f in files:
        p = Path(f)
        h.update(p.name.encode() + b"\0")
        try:
            with p.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError:
            h.update(b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# The per-job sandbox

_CONTEXT: Any = None
# Imported once by the fork server, so a job's child neither pays for them nor maps them under
# its memory limit.
PRELOAD = ("pyarrow.parquet", "diagnosers.readers", "diagnosers.readers.artifact", "diagnosers.diagnose",
           "diagnosers.fleet")
# Words of an allocation failure that is not a MemoryError (Arrow, a shared object that cannot be mapped).
# what allocation failures look like once they have passed through a library (numpy, pyarrow's
# thread pool under RLIMIT_AS: "Failed to launch worker thread: Resource temporarily unavailable")
_ALLOC_WORDS = (
    "alloc", "failed to map", "out of memory", "cannot allocate", "failed to launch worker thread",
)


def _context() -> Any:
    """A forkserver context whose server has the engine imported, so each job's fork is cheap and
    starts single-threaded (never ``fork`` from a threaded Ray worker)."""
    global _CONTEXT
    if _CONTEXT is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))
        _CONTEXT = ctx
    return _CONTEXT


def _vm_size_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(conn: Any, job: dict[str, Any], memory_mb: int) -> None:
    """Inside the sandbox: cap the address space, analyse, send ``(status, payload)``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    limit = _vm_size_bytes() + memory_mb * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        from diagnosers.fleet import analyse_job

        row = analyse_job(job["paths"], job["job_id"], meta_path=job.get("meta"), gpus=job.get("gpus"),
                          duration_hours=job.get("duration_hours"), team=job.get("team"))
        conn.send(("ok", row))
    except MemoryError:
        conn.send(("failed", f"memory limit exceeded: the analysis needed more than {memory_mb} MiB"))
    except Exception as exc:  # the job's own failure, recorded with its reason
        reason = f"{type(exc).__name__}: {exc}"
        if any(w in reason.lower() for w in _ALLOC_WORDS):
            reason = f"memory limit exceeded ({memory_mb} MiB): {reason}"
        conn.send(("failed", reason))
    finally:
        conn.close()


def run_isolated(job: dict[str, Any], timeout_s: float, memory_mb: int) -> dict[str, Any]:
    """Analyse ``job`` (a ``FleetJobSource.as_dict()``) in a limited child; see the module docstring.

    Returns ``{"job_id", "status": "ok"|"failed", "row"|"error", "seconds", "lost"}``; ``lost`` is
    true when the child died without an answer (a signal or a hard crash), which the caller may retry.
    """
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, job, memory_mb), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    send.close()
    result: dict[str, Any] = {"job_id": job["job_id"], "lost": False}
    try:
        if recv.poll(timeout_s):
            try:
                status, payload = recv.recv()
            except EOFError:
                status, payload = None, None
            if status == "ok":
                result.update(status="ok", row=payload)
            elif status == "failed":
                result.update(status="failed", error=payload)
            else:
                proc.join(5)
                result.update(status="failed", error=_death_reason(proc.exitcode, memory_mb), lost=True)
        else:
            proc.kill()
            result.update(status="failed", error=f"timed out after {timeout_s:g} s")
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        recv.close()
    result["seconds"] = time.perf_counter() - t0
    return result


def _death_reason(exitcode: int | None, memory_mb: int) -> str:
    if exitcode is not None and exitcode < 0:
        import signal

        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else str(-exitcode)
        return f"the analysis process died ({name}); memory limit {memory_mb} MiB"
    return f"the analysis process exited with code {exitcode} without a result"


# ---------------------------------------------------------------------------------------------
# The results folder


def safe_name(job_id: str) -> str:
    """The file name of a job id (unsafe characters replaced, a short hash added when changed)."""
    name = _SAFE_ID.sub("_", job_id)
    if name != job_id:
        name += "-" + hashlib.sha256(job_id.encode()).hexdigest()[:8]
    return name


class ResultStore:
    """``OUT/jobs/<id>.json`` per job (result + content hash) and the fleet outputs."""

    def __init__(self, out_dir: str | Path) -> None:
        self.root = Path(out_dir)
        self.jobs_dir = self.root / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)

    def path_of(self, job_id: str) -> Path:
        return self.jobs_dir / f"{safe_name(job_id)}.json"

    def done(self, job_id: str, digest: str) -> dict[str, Any] | None:
        """The stored successful result of this job with this content hash, else None."""
        p = self.path_of(job_id)
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if rec.get("status") == "ok" and rec.get("content_hash") == digest and rec.get("job_id") == job_id:
            return dict(rec)
        return None

    def save(self, result: dict[str, Any]) -> None:
        p = self.path_of(result["job_id"])
        tmp = p.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result), encoding="utf-8")
        tmp.replace(p)

    def write_outputs(self, results: Iterable[dict[str, Any]], jobs: Sequence[FleetJobSource]) -> Any:
        """Rows of these results (in the jobs' order) -> fleet.parquet, report.{json,txt}, PNGs."""
        from diagnosers.fleet import (
            STATUS_FAILED,
            empty_row,
            fleet_statistics,
            render_fleet_text,
            write_table,
        )
        from diagnosers.fleet_plots import write_plots

        by_id = {r["job_id"]: r for r in results}
        rows = []
        for job in jobs:
            r = by_id.get(job.job_id)
            if r is None:
                continue
            if r["status"] == "ok":
                row = dict(r["row"])
                # the manifest's bookkeeping may change without the trace changing
                row.update(team=job.team, gpus=job.gpus or row.get("gpus"), duration_hours=job.duration_hours)
                row["gpu_hours"] = row["gpus"] * job.duration_hours if job.duration_hours else None
                row["gpu_hours_wasted"] = (row["gpu_hours"] * row["wasted_fraction"]
                                           if row["gpu_hours"] is not None else None)
            else:
                row = empty_row(job.job_id, status=STATUS_FAILED, error=r.get("error"), team=job.team,
                                gpus=job.gpus, duration_hours=job.duration_hours)
            row["content_hash"] = r.get("content_hash")
            rows.append(row)
        report = fleet_statistics(rows)
        write_table(rows, self.root / "fleet.parquet")
        (self.root / "report.json").write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        (self.root / "report.txt").write_text(render_fleet_text(report) + "\n", encoding="utf-8")
        write_plots(report, rows, self.root)
        return report
