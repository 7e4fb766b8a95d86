"""The Ray executor on a real local Ray instance (one per module, loopback only): the same jobs
as the process pool give the same results, rejections keep their status and message, and a
server started with ``executor="ray"`` runs its analyses there."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from lens_testing import LiveServer

from diagnosers.samples import artifact_trace
from server.core import jobs
from server.core.errors import ApiError
from server.core.executor import LocalExecutor
from server.core.settings import Settings

# before Ray is imported: no token auth, everything on 127.0.0.1, no usage reporting
for _k, _v in {
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}.items():
    os.environ.setdefault(_k, _v)

ray = pytest.importorskip("ray")
from server.core.ray_executor import RayExecutor  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One local Ray instance for the module (2 CPUs, a small object store, temp files in a test folder)."""
    tmp = tmp_path_factory.mktemp("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=200 * 1024**2,
        _temp_dir=str(tmp),
    )
    yield
    ray.shutdown()


def st_ref() -> jobs.TraceRef:
    trace = artifact_trace("ST")
    return jobs.TraceRef.of("st", [trace, trace.with_name("meta-ST.yaml")], {}, trace.parent)


def test_ray_tasks_give_the_pool_results_and_carry_rejections(ray_local: None, tmp_path: Path) -> None:
    rex = RayExecutor(workers=2, max_queue=4, initializer=jobs.init_worker, initargs=(2, False))
    local = LocalExecutor(1)
    missing = jobs.TraceRef.of("nope", [tmp_path / "gone.parquet"], {}, tmp_path)
    seen: list[tuple[float, str]] = []

    async def main() -> tuple[str, str, list[int]]:
        on_ray = await rex.submit(jobs.whatif_json, st_ref(), progress=lambda f, m: seen.append((f, m)))
        here = await local.submit(jobs.whatif_json, st_ref())
        with pytest.raises(ApiError) as err:
            await rex.submit(jobs.traced_steps, missing)
        assert err.value.status == 422 and "gone.parquet" in err.value.message
        assert str(tmp_path) not in err.value.message
        pids = [await rex.submit(os.getpid) for _ in range(2)]
        return on_ray, here, pids

    on_ray, here, pids = anyio.run(main)
    assert on_ray == here and '"slowdown"' in on_ray
    assert os.getpid() not in pids, "the jobs ran in Ray workers, not in this process"
    assert seen[0][0] == 0.0 and "Ray" in seen[0][1] and seen[-1] == (1.0, "done")
    status = rex.status()
    assert (status["kind"], status["done"], status["failed"], status["running"]) == ("ray", 3, 1, 0)
    rex.close()
    assert ray.is_initialized(), "an executor that joined a running Ray leaves it running"


def test_a_server_with_the_ray_executor_analyses_there(ray_local: None, tmp_path: Path, st_files) -> None:
    settings = Settings(data_dir=tmp_path, executor="ray")
    with LiveServer(settings) as live, httpx.Client(base_url=live.url, timeout=120) as http:
        files = [("files", (p.name, p.read_bytes())) for p in st_files]
        up = http.post("/api/traces", files=files)
        assert up.status_code == 201, up.text
        tid = up.json()["trace_id"]
        diag = http.get(f"/api/traces/{tid}/diagnosis")
        assert diag.status_code == 200 and diag.json()["causes"], diag.text
        health = http.get("/healthz").json()
    assert "ray" in str(health), health


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ray-address", "127.0.0.1:6379"], "--ray-address needs --executor ray"),
        (["--database", "mysql://x@127.0.0.1/db"], "give a postgresql://"),
    ],
)
def test_serve_refuses_cluster_options_it_cannot_use(tmp_path: Path, args: list[str], message: str) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", "0", "--data-dir", str(tmp_path), *args]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(root)))  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr
