"""``/healthz`` latency while the server does heavy work: is the event loop free?

    .venv/bin/python -m bench.loop_latency_bench

Starts ``straggler-lens serve`` (worker-process executor, one worker per core) on a loopback
port, generates two synthetic jobs with ``diagnosers.synth`` (a ~100 MB native JSON Lines upload,
and the 2M-op dp 128 x pp 8 x 32 mb x 10 steps job as parquet), then polls ``/healthz`` every
20 ms: first idle (the floor), then while the 100 MB upload streams in and the 2M-op job is
uploaded and diagnosed for the first time, all at once. Prints p50 / p99 / max of both phases
and the ratio of the busy p99 to the idle p99. Target: busy p99 under 100 ms on a 2-core machine.
``--workers 0`` runs the same work in threads of the server process (the peer to compare with).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from bench.engine_bench import synth_job
from bench.serve_process import free_port, start_serve
from bench.server_bench import pct

POLL_S = 0.02


async def file_chunks(path: Path, size: int = 256 * 1024) -> AsyncIterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(size):
            yield chunk
            await asyncio.sleep(0)


async def poll(client: httpx.AsyncClient, stop: asyncio.Event, out: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        r = await client.get("/healthz")
        r.raise_for_status()
        out.append(time.perf_counter() - start)
        await asyncio.sleep(POLL_S)


async def heavy(client: httpx.AsyncClient, upload: Path, big: Path, meta: Path) -> dict[str, float]:
    async def upload_100mb() -> float:
        t = time.perf_counter()
        r = await client.post("/api/traces?filename=trace.jsonl", content=file_chunks(upload))
        r.raise_for_status()
        return time.perf_counter() - t

    async def diagnose_2m() -> float:
        t = time.perf_counter()
        files = [("files", (big.name, big.read_bytes())), ("files", (meta.name, meta.read_bytes()))]
        r = await client.post("/api/traces", files=files)
        r.raise_for_status()
        tid = r.json()["trace_id"]
        d = await client.get(f"/api/traces/{tid}/diagnosis")
        d.raise_for_status()
        return time.perf_counter() - t

    up, diag = await asyncio.gather(upload_100mb(), diagnose_2m())
    return {"upload_s": up, "diagnosis_s": diag}


def line(name: str, xs: list[float]) -> str:
    ms = [x * 1000 for x in xs]
    return (
        f"{name:<34} n={len(ms):>4}  p50 {pct(ms, 0.5):7.1f} ms  p99 {pct(ms, 0.99):7.1f} ms  "
        f"max {max(ms):7.1f} ms"
    )


async def measure(base: str, upload: Path, big: Path, meta: Path, idle_s: float) -> None:
    limits = httpx.Limits(max_connections=8)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as probe, httpx.AsyncClient(
        base_url=base, timeout=600, limits=limits
    ) as worker:
        idle: list[float] = []
        stop = asyncio.Event()
        task = asyncio.create_task(poll(probe, stop, idle))
        await asyncio.sleep(idle_s)
        stop.set()
        await task
        busy: list[float] = []
        stop = asyncio.Event()
        task = asyncio.create_task(poll(probe, stop, busy))
        times = await heavy(worker, upload, big, meta)
        stop.set()
        await task
        status = (await probe.get("/healthz")).json().get("executor")
    print(line("/healthz idle", idle))
    print(line("/healthz during upload + diagnosis", busy))
    print(
        f"busy p99 / idle p99 = {pct(busy, 0.99) / pct(idle, 0.99):.1f}x; "
        f"100 MB upload {times['upload_s']:.1f} s, "
        f"2M-op upload + first diagnosis {times['diagnosis_s']:.1f} s; "
        f"executor {status}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-s", type=float, default=3.0)
    ap.add_argument("--workers", type=int, default=None, help="serve --workers (0 = threads, the peer)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        _, upload, n_up = synth_job(root, 128, 8, 32, 3, native=True)
        big, _, n_big = synth_job(root, 128, 8, 32, 10, native=False)
        assert upload is not None
        meta = root / "meta-dp128-pp8-mb32.yaml"
        print(
            f"jobs: upload {upload.stat().st_size / 2**20:.0f} MiB native ({n_up:,} ops), "
            f"diagnosis {n_big:,} ops parquet ({big.stat().st_size / 2**20:.0f} MiB); "
            f"generated in {time.perf_counter() - t:.0f} s",
            flush=True,
        )
        port = free_port()
        workers = ["--workers", str(a.workers)] if a.workers is not None else []
        proc = start_serve(port, root / "server.log", "--data-dir", str(root / "data"), *workers)
        try:
            time.sleep(2.0)  # let the workers finish warming up (imports, incident library)
            asyncio.run(measure(f"http://127.0.0.1:{port}", upload, big, meta, a.idle_s))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
