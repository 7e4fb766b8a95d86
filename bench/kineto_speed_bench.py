"""Kineto read speed against gunzip + ``json.loads`` alone, on generated sets of >= 100 MB of JSON.

    .venv/bin/python -m bench.kineto_speed_bench [--mb 100]

Two sets, one per reader path: a kernel-level DDP job without span names
(``diagnosers.synth.kineto_kernels``) and a named-span job (the recorded example's rank files with
their steps repeated). For each it times, in this process, (a) the peer: every file read,
gunzipped and parsed with ``json.loads``; (b) ``load_trace`` end to end (inflate, parse, build the
op table), alternating (a) and (b) three times and keeping each one's best. It prints the ratio
(b)/(a) (goal <= 1) and, measured in a fresh subprocess each, the
peak RSS growth of (b) over the set's decompressed size (goal <= 3).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.profiler_readers_bench import replicate_steps

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "kineto_example" / "slow-rank" / "traces"


def _kernel_set(out: Path, mb: float) -> None:
    from diagnosers.synth.kineto_kernels import KernelJobSpec, generate

    # about 2.2 MB of JSON per step over the 8 ranks
    steps = max(2, int(mb / 2.1) + 1)
    generate(KernelJobSpec(ranks=8, steps=steps, layers=60, kernels_per_layer=4, bucket_layers=6), out)
    (out / "labels.json").unlink()


def _named_set(out: Path, mb: float) -> None:
    files = sorted(EXAMPLE.glob("*.json.gz"))
    size = sum(len(gzip.decompress(p.read_bytes())) for p in files)
    copies = max(1, int(1.4 * mb * 1e6 / size) + 1)
    for p in files:
        replicate_steps(p, out / p.name, copies, level=3)


def _peer(paths: list[Path]) -> float:
    t0 = time.perf_counter()
    for p in paths:
        json.loads(gzip.decompress(p.read_bytes()))
    return time.perf_counter() - t0


def _ours(paths: list[Path]) -> tuple[float, int]:
    from diagnosers.readers import load_trace

    t0 = time.perf_counter()
    trace = load_trace(paths)
    return time.perf_counter() - t0, len(trace.ops)


_RSS = """
import os, sys, threading, time
from pathlib import Path
import diagnosers.readers.kineto, diagnosers.readers.kineto_kernels, diagnosers.whatif
from diagnosers.readers import load_trace
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * page
r0 = rss(); peak = [r0]; done = []
def sample():
    while not done:
        peak[0] = max(peak[0], rss()); time.sleep(0.005)
th = threading.Thread(target=sample); th.start()
load_trace([Path(p) for p in sys.argv[1:]])
done.append(1); th.join()
print(max(peak[0], rss()) - r0)
"""


def _peak(paths: list[Path]) -> int:
    out = subprocess.run([sys.executable, "-c", _RSS, *map(str, paths)], check=True, capture_output=True,
                         text=True, cwd=ROOT)
    return int(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=100.0, help="decompressed JSON per set (MB)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for label, make in (("kernel-level (no span names)", _kernel_set), ("named spans", _named_set)):
            d = Path(tmp) / label.split()[0]
            d.mkdir()
            make(d, args.mb)
            paths = sorted(d.glob("*.json.gz"))
            raw = sum(len(gzip.decompress(p.read_bytes())) for p in paths)
            # interleaved, best of 3: on a shared machine the load moves between runs, and
            # back-to-back runs of one side would measure it in different load
            peers, runs = [], []
            for _ in range(3):
                peers.append(_peer(paths))
                runs.append(_ours(paths))
            peer = min(peers)
            ours, n_ops = min(runs)
            peak = _peak(paths)
            print(f"{label}: {len(paths)} files, {raw / 1e6:.0f} MB of JSON, {n_ops} ops")
            print(f"  gunzip + json.loads: {peer:.2f} s; load_trace: {ours:.2f} s; "
                  f"ratio {ours / peer:.2f} (goal <= 1)")
            print(f"  peak RSS growth of load_trace: {peak / 1e6:.0f} MB = {peak / raw:.2f}x the JSON "
                  "(goal <= 3)")


if __name__ == "__main__":
    main()
