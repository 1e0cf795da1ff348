"""End-to-end overhead: the same plain completion (the demo model, "Who are you?") three
ways, side by side in one run (printed, never pass/fail):

1. directly against the demo model's llama-cpp-python server (``/v1/chat/completions``);
2. through LiteLLM's proxy in front of that server, when its proxy imports: from the venv, or
   from BENCH_LITELLM_PATH, a folder the proxy's process alone puts first on its path. The
   venv's litellm (>= 1.110, for tests/e2e) cannot have its proxy here: 1.110's proxy extra
   requires litellm-proxy==1.110.2, which the package index this machine reaches does not
   hold; 1.108.7's does not, so ``pip install --target DIR 'litellm[proxy]==1.108.7'`` and
   BENCH_LITELLM_PATH=DIR give the figure. ``make bench`` does both (the Makefile's
   LITELLM_PROXY, .venv/clients/litellm-proxy, ~1 min to install, ~730 MB). Otherwise it is
   printed unavailable, with the reason;
3. through the horde: the chat front (its own process), the native API (on the embedded
   stores), and the project's worker (``horde-chat worker``, its own process, long-polling
   its pops) on that same llama-cpp-python server.

The client runs in a process of its own (spawned), sequential requests, so no leg shares an
interpreter with the server it measures. Figures: ``e2e_direct_p50_ms``,
``e2e_litellm_p50_ms``, ``e2e_horde_p50_ms``, ``e2e_horde_p99_ms`` (and the direct p99 and the
horde's p50 overhead over the direct call).

Those horde figures are taken with the native API's rate limits off, as every bench's
native API has them (bench/native_stack.py). ``make run`` has them on. So a second horde
stack runs at the shipped limits, with two legs in turn:
- one request a second (SHIPPED_PACE), within chat_async's 2 a second and 90 a minute per
  client: ``e2e_horde_paced_p50_ms`` / ``_p99_ms``, what a person at a chat UI meets;
- back to back, as a script or an agent loop sends them: ``e2e_horde_back_to_back_p50_ms``,
  ``_p90_ms`` and ``_rate`` (requests a second).

The back-to-back client is over the per-client submit limit, which follows upstream (2 a
second). The native API refuses the third submit of a window with retry-after-ms, the time
left of the window to the millisecond; the front holds the refused submit that long and up
to a tenth more (a spread, so a burst does not come back at once), then submits it again. It
lands first in the next window, the next request is the window's second, and the one after is
refused: every other request waits out the rest of a window, and the client gets close to the
limit's 2 requests a second.

Until 2026-12-05 the refusal said only Retry-After (whole seconds), and the front waited
1 s times 1 to 2: every other request waited 1-2 s. The back-to-back leg alone (a temporary
script, 40 requests, each tree's front, native API and worker; A B A B, 02:00-02:05):

| tree | p50 | p90 | rate |
| --- | --- | --- | --- |
| before (f96b02b) | 1079.6 / 1047.7 ms | 1878.4 / 1785.1 ms | 1.26 / 1.36 requests/s |
| after (7a311f5) | 987.4 / 965.2 ms | 1036.3 / 1044.8 ms | 1.92 / 1.90 requests/s |

The p50 stays near a second because half the requests are the ones the limit holds; their
wait is now the window's end, not up to a second past it.

LiteLLM's proxy on this machine (2026-12-05 06:27, idle, host_python_ms 25.38, 200 requests
a leg, the proxy 1.108.7 as ``make bench`` installs it): direct 6.41 / 8.26 ms (p50 / p99),
through LiteLLM's proxy 23.99 / 32.53, through the horde 31.03 / 45.26. LiteLLM's proxy adds
17.6 ms p50 here, against the 2 ms of its published figures (issue 14's anchor) on its own
hardware; the horde, with its queue, three services and the worker's hop, adds 24.6.
(bench/hop_floor.py: a bare HTTP hop adds 0.41 ms here.)

The whole bench after it (02:14, host_python_ms 25.3): e2e_horde_p50_ms 24.94 (limits off),
e2e_horde_paced_p50_ms / p99 30.25 / 39.38 ms, back to back p50 / p90 978.64 / 1053.52 ms,
1.90 requests/s.

First run (2026-12-04 23:29, 50 unlimited samples, 40 at the shipped limits):

| figure | value |
| --- | --- |
| e2e_horde_p50_ms (limits off) | 30.06 ms |
| e2e_horde_paced_p50_ms / p99 | 40.38 / 54.79 ms |
| e2e_horde_back_to_back_p50_ms / p90 | 1112.95 / 1819.34 ms |
| e2e_horde_back_to_back_rate | 1.23 requests/s |

A temporary script ran the paced leg (20 samples) with the limits off, on, off, on, in one
sitting: 27.51 / 28.94 / 28.95 / 35.95 ms. Counting the limits costs no more than the
noise. The paced leg's extra time in the run above is that sitting's idle gaps between
requests, not the limiter.

The back-to-back figures are the limit's and the front's retry policy's, not the horde's
speed (the retry then waited Retry-After's whole second times 1-2; see above for what it
waits now). The 90-a-minute limit still holds such a client to 1.5 requests a second over a
minute: past its 90th request the refusal's wait is the minute's end, which the front holds
only within its submit patience (10 s) and otherwise answers 429 with that retry-after-ms.

Where a horde completion's time goes (2026-12-05, a temporary tree of 1522d03 whose front,
native API and worker wrote a perf_counter stamp at each step, comparable across processes;
this bench's horde leg, 300 requests, limits off, p50 of each step): the client's total
24.78 ms, from the front's handler to its answer 22.99 ms:

| step | p50 ms | p90 ms |
| --- | --- | --- |
| front: request read, validated, submit sent | 0.31 | 0.71 |
| submit sent -> the native chat view starts (uvicorn, a2wsgi's thread, Flask) | 0.96 | 1.46 |
| chat view -> its commit (validation, admission, enqueue) | 4.16 | 5.77 |
| the wake -> the woken pop has its job (its statement and the chat job's payload) | 2.84 | 4.08 |
| pop answered -> the worker has the job | 0.86 | 1.35 |
| the worker's call to llama-cpp-python | 7.55 | 9.86 |
| worker's submit sent -> the native lane has it | 0.65 | 0.87 |
| submit -> its events published (find, payment, final status) | 3.25 | 4.59 |
| the Redis SET and PUBLISH | 0.52 | 1.13 |
| published -> the front's answer sent (wake, outcome read, response) | 0.92 | 1.62 |

The native API's part is ~12 ms of the 23, the backend's ~7.5 (5.4 ms p50 called directly
in the same run: the two cores are shared with what the stack does meanwhile), the front's
~1.3. Each step is already a few round trips; none is half of the total. Seen on the way:
the worker pops again as soon as it has submitted, and that pop (3.0 ms p50, it finds
nothing and then waits) overlaps the next request's chat submit in the same process.

Measured and not kept: a known worker's pop rewrote its row (the declaration and
last_check_in) on every run of the long poll, a WAL flush each (an UPDATE in autocommit 0.33-
0.38 ms p50 against a SELECT's 0.15-0.19 alone); rewriting it only when the declaration
changed or the check-in was 10 s old made those pops write nothing. A B A B in one sitting
(150 requests each): client p50 26.34 / 28.58 (rewrite) vs 24.96 / 31.53 ms (only when
stale), the nothing-found pop 3.27 / 3.55 vs 2.48 / 3.39 ms: no difference the noise lets
through, so the pop keeps upstream's check-in on every pop.

The chat submit's transaction in 3 round trips before its commit, not 9 (2026-12-04, issue
14: bench/dispatch.py says how), A B A B against d13e805 on this 2-core VM, whose speed
moves more than the change from one run to the next: e2e_horde_p50_ms 44.91 / 39.31 ->
25.18 / 33.08 ms (17:17-17:19); a second sitting (17:55-17:58), A B A B A B: 33.07 / 46.92 /
46.33 -> 36.64 / 36.96 / 32.32 ms, the direct call 8.9-10.3 ms throughout.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.front_stack import bench_users, start_front, stop_front
from bench.native_stack import native_service
from bench.support.figures import percentile
from bench.support.host import print_host_figures
from runtime.worker.llama_server import LlamaServer
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME, build_tiny_model

SAMPLES = int(os.environ.get("BENCH_E2E_SAMPLES", "200"))
SHIPPED_SAMPLES = int(os.environ.get("BENCH_E2E_SHIPPED_SAMPLES", "40"))
"""Each horde leg at the shipped rate limits: fewer, as they take a second or so each."""
SHIPPED_PACE = 1.0
"""The paced leg's request interval: within chat_async's 2 a second and 90 a minute per
client, the latter counting the back-to-back leg after it too (spec/rate_limits.yaml)."""
WARMUP = 10
CONTEXT = 1024
MESSAGES = [{"role": "user", "content": "Who are you?"}]
READY_TIMEOUT = 120.0
LITELLM_PATH = os.environ.get("BENCH_LITELLM_PATH", "")
LITELLM_KEY = "sk-bench-" + secrets.token_hex(16)
"""The proxy's master key (it refuses to start without one), sent by the client."""
LITELLM_UNAVAILABLE = (
    "LiteLLM's proxy does not import: the venv's litellm 1.110.2 needs litellm-proxy==1.110.2 "
    "for its proxy extra, absent from the package index here; set BENCH_LITELLM_PATH to a "
    "folder with pip install --target FOLDER 'litellm[proxy]==1.108.7'"
)


def _pct(values: list[float], p: float) -> float:
    """The percentile of samples in seconds, in milliseconds."""
    return percentile(values, p) * 1000


def measure(url: str, headers: dict[str, str], samples: int, pace: float, queue: Any) -> None:
    """Child process: ``WARMUP + samples`` sequential completions, each started ``pace``
    seconds after the one before at the earliest (0: back to back); puts the latencies."""
    body = {"model": MODEL_NAME, "messages": MESSAGES}
    times: list[float] = []
    try:
        with httpx.Client(timeout=60, headers=headers) as client:
            started = 0.0
            for i in range(WARMUP + samples):
                time.sleep(max(0.0, started + pace - time.perf_counter()) if i else 0.0)
                started = time.perf_counter()
                response = client.post(url, json=body)
                elapsed = time.perf_counter() - started
                response.raise_for_status()
                content = response.json()["choices"][0]["message"]["content"]
                if content != DEMO_REPLY:
                    raise RuntimeError(f"unexpected reply {content!r}")
                if i >= WARMUP:
                    times.append(elapsed)
        queue.put(times)
    except Exception as exc:  # noqa: BLE001  # reported by the parent
        queue.put(repr(exc))


def run_leg(
    url: str, headers: dict[str, str] | None = None, samples: int = SAMPLES, pace: float = 0.0
) -> list[float]:
    spawn = multiprocessing.get_context("spawn")
    queue: Any = spawn.Queue()
    child = spawn.Process(target=measure, args=(url, headers or {}, samples, pace, queue))
    child.start()
    result = queue.get(timeout=(samples + WARMUP) * (30 + pace) + 120)
    child.join(timeout=30)
    if not isinstance(result, list):
        raise RuntimeError(f"the client failed: {result}")
    return result


def litellm_env() -> dict[str, str]:
    """The proxy process's environment: BENCH_LITELLM_PATH first on its path, if set; no
    fetch of the model cost map at import."""
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MASTER_KEY": LITELLM_KEY,
    }
    if LITELLM_PATH:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [LITELLM_PATH, env.get("PYTHONPATH")]))
    return env


def litellm_installed() -> bool:
    check = [sys.executable, "-c", "import litellm.proxy.proxy_server"]
    found = subprocess.run(check, env=litellm_env(), capture_output=True, timeout=300)
    return found.returncode == 0


def litellm_leg(backend: str) -> list[float] | None:
    """Through LiteLLM's proxy (its own process) in front of ``backend``, if it imports."""
    if not litellm_installed():
        return None
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="bench-litellm-") as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(
            "model_list:\n"
            f"  - model_name: {MODEL_NAME}\n"
            "    litellm_params:\n"
            f"      model: openai/{MODEL_NAME}\n"
            f"      api_base: {backend}\n"
            "      api_key: none\n"
        )
        command = [sys.executable, "-m", "litellm.proxy.proxy_cli", "--config", str(config)]
        command += ["--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
        proxy = subprocess.Popen(
            command, env=litellm_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url + "/health/liveliness")
            headers = {"Authorization": f"Bearer {LITELLM_KEY}"}
            return run_leg(url + "/v1/chat/completions", headers)
        finally:
            proxy.terminate()
            proxy.wait(timeout=20)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {READY_TIMEOUT:.0f} s")


def horde_legs(
    backend: str, model: Path, legs: list[tuple[int, float]], *, rate_limits: bool = False
) -> list[list[float]]:
    """Through the front, the native API and the project's long-polling worker, a leg for
    each (samples, pace) of ``legs``, in turn (``rate_limits``: the native API's shipped
    limits on)."""
    with (
        native_service(rate_limits=rate_limits) as service,
        tempfile.TemporaryFile("w+") as output,
    ):
        requester, owner = bench_users(service.context.sessions)
        redis_url = str(service.context.settings.redis_url)
        front, front_url = start_front(redis_url, service.url, cap=64, poll=10)
        # llama-cpp-python's server reports its context on no route, so the worker is told
        # (without it the worker refuses to start, as it tells a user)
        command = [
            sys.executable, "-m", "runtime.cli", "worker",
            "--horde", service.url, "--api-key", owner, "--backend", backend,
            "--model", MODEL_NAME, "--gguf", str(model), "--context", str(CONTEXT),
            "--chat-only",
        ]  # fmt: skip
        worker = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        try:
            _wait_worker(f"{service.url}/api/v2", worker, output)
            headers = {"Authorization": f"Bearer {requester}"}
            url = f"{front_url}/v1/chat/completions"
            return [run_leg(url, headers, samples, pace) for samples, pace in legs]
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            stop_front(front)


def _wait_worker(native: str, worker: subprocess.Popen[bytes], output: Any) -> None:
    """Until the worker is online (its model listed with a chat worker); its output if it
    exits first."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            output.seek(0)
            raise RuntimeError(f"the worker exited ({worker.returncode}): {output.read()}")
        models = httpx.get(native + "/status/models", params={"type": "text"}, timeout=5).json()
        if any(m.get("name") == MODEL_NAME and m.get("chat_count") for m in models):
            return
        time.sleep(0.2)
    raise TimeoutError("the worker did not come online")


def main() -> None:
    print_host_figures()  # how fast the machine is at the start (bench/support/host.py)
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as folder:
        model = Path(folder) / "demo.gguf"
        build_tiny_model(model)
        with LlamaServer(model, n_ctx=CONTEXT) as llama:
            backend = llama.openai_base_url
            direct = run_leg(f"{backend}/chat/completions")
            litellm = litellm_leg(backend)
            (horde,) = horde_legs(backend, model, [(SAMPLES, 0.0)])
            shipped = [(SHIPPED_SAMPLES, SHIPPED_PACE), (SHIPPED_SAMPLES, 0.0)]
            paced, back_to_back = horde_legs(backend, model, shipped, rate_limits=True)
    print(f"plain completion of the demo model, {SAMPLES} sequential requests per leg")
    print(f"{'':34} {'p50 ms':>9} {'p99 ms':>9}")
    legs = [("direct (llama-cpp-python)", direct), ("LiteLLM proxy", litellm), ("horde", horde)]
    for label, times in legs:
        if times is None:
            print(f"{label:34} {'n/a':>9} {'n/a':>9}")
        else:
            print(f"{label:34} {_pct(times, 50):9.2f} {_pct(times, 99):9.2f}")
    print(f"figure: e2e_direct_p50_ms = {_pct(direct, 50):.2f} ms")
    print(f"figure: e2e_direct_p99_ms = {_pct(direct, 99):.2f} ms")
    if litellm is None:
        print(f"figure: e2e_litellm_p50_ms = unavailable ({LITELLM_UNAVAILABLE})")
    else:
        print(f"figure: e2e_litellm_p50_ms = {_pct(litellm, 50):.2f} ms")
        print(f"figure: e2e_litellm_p99_ms = {_pct(litellm, 99):.2f} ms")
    print(f"figure: e2e_horde_p50_ms = {_pct(horde, 50):.2f} ms")
    print(f"figure: e2e_horde_p99_ms = {_pct(horde, 99):.2f} ms")
    overhead = _pct(horde, 50) - _pct(direct, 50)
    print(f"figure: e2e_horde_overhead_p50_ms = {overhead:.2f} ms")
    print(
        f"through the horde at the shipped rate limits, {SHIPPED_SAMPLES} sequential requests:"
        f" one every {SHIPPED_PACE:.1f} s (within them), then back to back"
    )
    print(f"figure: e2e_horde_paced_p50_ms = {_pct(paced, 50):.2f} ms")
    print(f"figure: e2e_horde_paced_p99_ms = {_pct(paced, 99):.2f} ms")
    print(f"figure: e2e_horde_back_to_back_p50_ms = {_pct(back_to_back, 50):.2f} ms")
    print(f"figure: e2e_horde_back_to_back_p90_ms = {_pct(back_to_back, 90):.2f} ms")
    rate = len(back_to_back) / sum(back_to_back)
    print(f"figure: e2e_horde_back_to_back_rate = {rate:.2f} requests/s", flush=True)


if __name__ == "__main__":
    main()
