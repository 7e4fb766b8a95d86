"""Server benchmark: MCP tool-call latency and throughput with 50 concurrent clients on loopback.

    .venv/bin/python -m bench.server_bench                 # 50 clients x 20 calls per workload
    .venv/bin/python -m bench.server_bench --clients 10 --calls 5

The server runs as its own process (``straggler-lens serve --preload-sample`` on a free loopback
port, fresh data folder); the clients run here on one event loop. Each MCP client is the SDK's
``Client`` over Streamable HTTP (modern protocol), opened once and then calling one tool
``--calls`` times in a row; all clients start together. Workloads:

- ``describe_trace``: a store lookup (SQLite row + summary);
- ``diagnose (cached)``: the bounded diagnosis view from the result cache (JSON parse + trimming);
- ``run_whatif scenario``: a what-if scenario on the ST sample (cached after the first call);
- the first two again as raw JSON-RPC POSTs from httpx (no SDK client cost on the client side);
- ``REST GET /diagnosis``: the same cached diagnosis over plain HTTP (httpx), for comparison.

Besides client-side latency and throughput, it reads the server process's CPU time (/proc) around
each workload: ``server_cpu_ms_per_call`` is what one call costs the server, a number that holds
on a shared machine where wall-clock throughput depends on the neighbours' load.

It also measures the first, uncached ``diagnose`` call (engine, detectors, remedies, similar
incidents) and an upload of the ST sample. Latencies are per call, from the client's side.
The run is bounded: clients x calls calls per workload, with a 120 s timeout each.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.serve_process import free_port, start_serve
from diagnosers.samples import artifact_trace


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def summary(
    name: str, lat: list[float], wall: float, errors: int, cpu: float, client_cpu: float
) -> dict[str, Any]:
    return {
        "server_cpu_ms_per_call": round(1000 * cpu / len(lat), 2),
        "client_cpu_ms_per_call": round(1000 * client_cpu / len(lat), 2),
        "workload": name,
        "calls": len(lat),
        "errors": errors,
        "wall_s": round(wall, 3),
        "calls_per_s": round(len(lat) / wall, 1) if wall > 0 else None,
        "p50_ms": round(1000 * statistics.median(lat), 1),
        "p95_ms": round(1000 * pct(lat, 0.95), 1),
        "p99_ms": round(1000 * pct(lat, 0.99), 1),
        "max_ms": round(1000 * max(lat), 1),
    }


async def mcp_workload(
    url: str, clients: int, calls: int, tool: str, args: dict[str, Any]
) -> tuple[list[float], float, int]:
    from mcp import Client

    lat: list[float] = []
    errors = 0
    ready = anyio.Event()
    opened = 0

    async def one() -> None:
        nonlocal errors, opened
        async with Client(url) as c:
            opened += 1
            if opened == clients:
                ready.set()
            await ready.wait()  # every client connected before the clock starts
            for _ in range(calls):
                t0 = time.perf_counter()
                r = await c.call_tool(tool, args)
                lat.append(time.perf_counter() - t0)
                errors += int(r.is_error)

    start = 0.0

    async def clock() -> None:
        nonlocal start
        await ready.wait()
        start = time.perf_counter()

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock)
            for _ in range(clients):
                tg.start_soon(one)
    return lat, time.perf_counter() - start, errors


async def httpx_workload(
    http: httpx.AsyncClient, clients: int, calls: int, call: Callable[[], Awaitable[httpx.Response]],
    failed: Callable[[httpx.Response], bool],
) -> tuple[list[float], float, int]:
    """``clients`` tasks sharing one httpx client, each making ``calls`` requests in a row:
    (latencies, wall time, failed calls)."""
    lat: list[float] = []
    errors = 0

    async def one() -> None:
        nonlocal errors
        for _ in range(calls):
            t0 = time.perf_counter()
            r = await call()
            lat.append(time.perf_counter() - t0)
            errors += int(failed(r))

    start = time.perf_counter()
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(one)
    return lat, time.perf_counter() - start, errors


def pool(clients: int) -> httpx.Limits:
    return httpx.Limits(max_connections=clients, max_keepalive_connections=clients)


async def rest_workload(base: str, clients: int, calls: int, path: str) -> tuple[list[float], float, int]:
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=pool(clients)) as http:
        return await httpx_workload(
            http, clients, calls, lambda: http.get(path), lambda r: r.status_code != 200
        )


async def raw_mcp_workload(
    base: str, clients: int, calls: int, tool: str, args: dict[str, Any]
) -> tuple[list[float], float, int]:
    """JSON-RPC ``tools/call`` POSTs (modern protocol) from plain httpx: measures the server without
    the SDK client's own cost (it validates every structured result against the output schema)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=pool(clients), headers=headers) as http:
        return await httpx_workload(
            http,
            clients,
            calls,
            lambda: http.post("/mcp", json=body),
            lambda r: r.status_code != 200 or r.json().get("result", {}).get("isError", True),
        )


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = await fn()
    return time.perf_counter() - t0, out


async def run(clients: int, calls: int) -> dict[str, Any]:
    from mcp import Client

    results: dict[str, Any] = {"clients": clients, "calls_per_client": calls, "workloads": []}
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        t0 = time.perf_counter()
        data, log = Path(tmp) / "data", Path(tmp) / "server.log"
        proc = start_serve(port, log, "--data-dir", str(data), "--preload-sample")
        results["startup_s"] = round(time.perf_counter() - t0, 2)
        base = f"http://127.0.0.1:{port}"
        url = f"{base}/mcp"
        try:
            tid = httpx.get(f"{base}/api/traces").json()["items"][0]["trace_id"]
            # a fresh upload of the ST sample (CSV-free parquet + meta, new bytes via an override)
            st = artifact_trace("ST")
            files = [
                ("files", (st.name, st.read_bytes())),
                ("files", ("meta-ST.yaml", st.with_name("meta-ST.yaml").read_bytes())),
            ]
            t_up = time.perf_counter()
            up = httpx.post(f"{base}/api/traces", files=files, params={"tp": 2}, timeout=60)
            results["upload_st_ms"] = round(1000 * (time.perf_counter() - t_up), 1)
            assert up.status_code == 201, up.text
            async with Client(url) as c:
                first, r = await timed(lambda: c.call_tool("diagnose", {"trace_id": tid}))
                assert not r.is_error, r.content
                results["diagnose_uncached_ms"] = round(1000 * first, 1)
                again, _ = await timed(lambda: c.call_tool("diagnose", {"trace_id": tid}))
                results["diagnose_cached_single_client_ms"] = round(1000 * again, 1)
                await c.call_tool("run_whatif", {"trace_id": tid, "pp_ranks": [3]})
            for name, tool, args in (
                ("describe_trace", "describe_trace", {"trace_id": tid}),
                ("diagnose (cached)", "diagnose", {"trace_id": tid}),
                ("run_whatif scenario (cached)", "run_whatif", {"trace_id": tid, "pp_ranks": [3]}),
            ):
                c0, k0 = cpu_seconds(proc.pid), time.process_time()
                lat, wall, errors = await mcp_workload(url, clients, calls, tool, args)
                cpu, kcpu = cpu_seconds(proc.pid) - c0, time.process_time() - k0
                results["workloads"].append(summary(f"MCP {name}", lat, wall, errors, cpu, kcpu))
            for name, tool, args in (
                ("describe_trace", "describe_trace", {"trace_id": tid}),
                ("diagnose (cached)", "diagnose", {"trace_id": tid}),
            ):
                c0, k0 = cpu_seconds(proc.pid), time.process_time()
                lat, wall, errors = await raw_mcp_workload(base, clients, calls, tool, args)
                cpu, kcpu = cpu_seconds(proc.pid) - c0, time.process_time() - k0
                results["workloads"].append(summary(f"MCP raw JSON-RPC {name}", lat, wall, errors, cpu, kcpu))
            c0, k0 = cpu_seconds(proc.pid), time.process_time()
            lat, wall, errors = await rest_workload(base, clients, calls, f"/api/traces/{tid}/diagnosis")
            cpu, kcpu = cpu_seconds(proc.pid) - c0, time.process_time() - k0
            results["workloads"].append(summary("REST GET /diagnosis", lat, wall, errors, cpu, kcpu))
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--calls", type=int, default=20, help="calls per client per workload")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    args = parser.parse_args(argv)
    results = anyio.run(run, args.clients, args.calls)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    head = f"server bench: {args.clients} concurrent clients x {args.calls} calls, loopback"
    print(f"{head}, cpus={os.cpu_count()}, load={os.getloadavg()[0]:.1f}")
    print(
        f"startup (with sample preload): {results['startup_s']} s; upload ST: {results['upload_st_ms']} ms; "
        f"first diagnose: {results['diagnose_uncached_ms']} ms; cached diagnose (1 client): "
        f"{results['diagnose_cached_single_client_ms']} ms"
    )
    cols = (
        "workload",
        "calls",
        "errors",
        "calls_per_s",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "max_ms",
        "server_cpu_ms_per_call",
        "client_cpu_ms_per_call",
    )
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for w in results["workloads"]:
        print("| " + " | ".join(str(w[c]) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
