"""End-to-end overhead: the same plain completion (the demo model, "Who are you?") three
ways, side by side in one run (printed, never pass/fail):

1. directly against the demo model's llama-cpp-python server (``/v1/chat/completions``);
2. through LiteLLM's proxy in front of that server, when its proxy imports: from the venv, or
   from BENCH_LITELLM_PATH, a folder the proxy's process alone puts first on its path. The
   venv's litellm (>= 1.110, for tests/e2e) cannot have its proxy here: 1.110's proxy extra
   requires litellm-proxy==1.110.2, which the package index this machine reaches does not
   hold; 1.108.7's does not, so ``pip install --target DIR 'litellm[proxy]==1.108.7'`` and
   BENCH_LITELLM_PATH=DIR give the figure. ``make bench`` does both (the Makefile's
   LITELLM_PROXY). Otherwise it is printed unavailable, with the reason;
3. through the horde: the chat front (its own process), the native API (on the embedded
   stores) and the project's worker (``horde-chat worker``, its own process, long-polling
   its pops) on that same llama-cpp-python server.

The three legs run interleaved: ``ROUNDS`` rounds, each a block of back-to-back requests a
leg, so the machine's drift over a run (other work, the clock, the cache) falls on every leg
alike. The client runs in a process of its own (spawned), so no leg shares an interpreter
with the server it measures. A leg's overhead is its percentile minus the direct
call's; ``e2e_overhead_ratio_vs_litellm`` is the horde's p50 overhead over LiteLLM's (1 or
less: the horde costs no more than the proxy), each ratio printed with its 90% interval over
the run's rounds drawn again (``_low``, ``_high``: how far the ratio could have moved with
the machine's speed, which moves within a run). Beside the latencies, the CPU each leg's
servers spent a request (``/proc``): the proxy's, and the horde's front, native API, worker,
Postgres and Redis.

The horde figures are taken with the native API's rate limits off, as every bench's native
API has them (bench/native_stack.py); the native API runs in this process, settled as
``horde-chat native`` settles its own (``runtime.service_process.settle``: no full
collection of the startup heap, the GIL's shorter switch interval). A second horde stack
runs at the shipped limits: one request a second (``e2e_horde_paced_*``, what a person at a
chat UI meets), then back to back (``e2e_horde_back_to_back_*``, a script's loop: the
per-client submit limit, 2 a second, holds it near 2 requests a second). docs/performance.md
has the figures measured so far and where a completion's time goes.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.front_stack import bench_users, start_front, stop_front
from bench.native_stack import native_service
from bench.support.cpu import CpuMeter, parent_pid
from bench.support.figures import bootstrap_interval, percentile
from bench.support.host import print_host_figures
from runtime.service_process import settle
from runtime.worker.llama_server import LlamaServer
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME, build_tiny_model

SAMPLES = int(os.environ.get("BENCH_E2E_SAMPLES", "1000"))
"""Requests a leg. A p99 is the tenth slowest of 1,000; of 200 it was the second, and the
p99 ratio moved 0.97-1.21 between runs of one tree."""
ROUNDS = int(os.environ.get("BENCH_E2E_ROUNDS", "20"))
"""The interleaved legs' rounds: each leg runs SAMPLES / ROUNDS requests a round."""
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


def serve_client(commands: Any, answers: Any) -> None:
    """Child process: the legs' one client. Each command is ``(url, headers, count, pace)``:
    ``count`` sequential completions, each started ``pace`` seconds after the one before at
    the earliest (0: back to back); answers their latencies (a string if one failed). A
    connection pool per URL is kept from one command to the next, so a leg's first block
    opens its connections and later blocks reuse them, as a long-lived client does."""
    body = {"model": MODEL_NAME, "messages": MESSAGES}
    clients: dict[str, httpx.Client] = {}
    while (command := commands.get()) is not None:
        url, headers, count, pace = command
        times: list[float] = []
        try:
            client = clients.setdefault(url, httpx.Client(timeout=60, headers=headers))
            started = 0.0
            for i in range(count):
                time.sleep(max(0.0, started + pace - time.perf_counter()) if i else 0.0)
                started = time.perf_counter()
                response = client.post(url, json=body)
                elapsed = time.perf_counter() - started
                response.raise_for_status()
                content = response.json()["choices"][0]["message"]["content"]
                if content != DEMO_REPLY:
                    raise RuntimeError(f"unexpected reply {content!r}")
                times.append(elapsed)
            answers.put(times)
        except Exception as exc:  # noqa: BLE001  # reported by the parent
            answers.put(repr(exc))
    for client in clients.values():
        client.close()


@dataclass
class Target:
    """Where a leg sends its completions, and the processes whose CPU it counts."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    meter: CpuMeter | None = None


@dataclass
class Leg:
    """One leg's latencies in seconds (all, and a list a round when interleaved), and the
    CPU its servers spent a request, in ms."""

    times: list[float] = field(default_factory=list)
    cpu_ms: dict[str, float] = field(default_factory=dict)
    rounds: list[list[float]] = field(default_factory=list)


class Client:
    """The client process (spawned, so it shares no interpreter with a server it measures)."""

    def __init__(self) -> None:
        spawn = multiprocessing.get_context("spawn")
        self._commands: Any = spawn.Queue()
        self._answers: Any = spawn.Queue()
        self._process = spawn.Process(
            target=serve_client, args=(self._commands, self._answers), daemon=True
        )
        self._process.start()

    def run(
        self, target: Target, count: int, pace: float = 0.0
    ) -> tuple[list[float], dict[str, float]]:
        """``count`` completions to ``target``: their latencies, and the CPU seconds its
        servers spent meanwhile."""
        if target.meter is not None:
            target.meter.start()
        self._commands.put((target.url, target.headers, count, pace))
        result = self._answers.get(timeout=count * (30 + pace) + 120)
        spent: dict[str, float] = {}
        if target.meter is not None:
            target.meter.stop()
            spent = target.meter.spent
        if not isinstance(result, list):
            raise RuntimeError(f"the client failed: {result}")
        return result, spent

    def leg(self, target: Target, samples: int, pace: float = 0.0) -> Leg:
        """A leg on its own: ``WARMUP`` completions, then ``samples`` measured."""
        self.run(target, WARMUP, pace)
        times, spent = self.run(target, samples, pace)
        return Leg(times, _per_request(spent, samples))

    def close(self) -> None:
        self._commands.put(None)
        self._process.join(timeout=30)


def interleaved(client: Client, targets: dict[str, Target]) -> dict[str, Leg]:
    """Every leg's ``SAMPLES`` completions, in ``ROUNDS`` rounds of a block a leg, the legs'
    order turned by one each round (so each block follows each other leg's as often): a
    machine whose speed drifts over the minutes of a run slows every leg alike, where legs
    run one after another would each meet a different machine. Within a block requests are
    back to back, so what a service does after answering still overlaps its own next
    request, as in a leg run alone."""
    names = list(targets)
    for name in names:
        client.run(targets[name], WARMUP)
    legs = {name: Leg() for name in names}
    spent: dict[str, dict[str, float]] = {name: {} for name in names}
    block = SAMPLES // ROUNDS
    for round_ in range(ROUNDS):
        turn = round_ % len(names)
        for name in names[turn:] + names[:turn]:
            times, cpu = client.run(targets[name], block)
            legs[name].times += times
            legs[name].rounds.append(times)
            for part, seconds in cpu.items():
                spent[name][part] = spent[name].get(part, 0.0) + seconds
    for name, leg in legs.items():
        leg.cpu_ms = _per_request(spent[name], len(leg.times))
    return legs


def _per_request(spent: dict[str, float], samples: int) -> dict[str, float]:
    return {name: seconds * 1000 / samples for name, seconds in spent.items()}


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


@contextmanager
def litellm_proxy(backend: str) -> Iterator[Target | None]:
    """LiteLLM's proxy (its own process) in front of ``backend``, if it imports (else
    None); the CPU counted is the proxy's."""
    if not litellm_installed():
        yield None
        return
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
            yield Target(url + "/v1/chat/completions", headers, CpuMeter({"proxy": proxy.pid}))
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


@contextmanager
def horde_stack(backend: str, model: Path, *, rate_limits: bool = False) -> Iterator[Target]:
    """The front, the native API (in this process) and the project's long-polling worker
    on ``backend`` (``rate_limits``: the native API's shipped limits on). The CPU counted is
    the front's, the native API's (this process's), the worker's and the stores' (Postgres
    and Redis)."""
    with (
        native_service(rate_limits=rate_limits) as service,
        tempfile.TemporaryFile("w+") as output,
    ):
        requester, owner = bench_users(service.context.sessions)
        settle()  # as `horde-chat native` runs it: its heap frozen, the GIL's 1 ms switch
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
            pids = {
                "front": front.pid,
                "native": os.getpid(),
                "worker": worker.pid,
                **_store_pids(service),
            }
            yield Target(
                f"{front_url}/v1/chat/completions",
                {"Authorization": f"Bearer {requester}"},
                CpuMeter(pids, alone=frozenset({"native"})),
            )
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            stop_front(front)


def _store_pids(service: Any) -> dict[str, int]:
    """The embedded Postgres server's process (its postmaster, the parent of a backend) and
    Redis's."""
    with service.context.autocommit.connect() as connection:
        backend = int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())
    postmaster = parent_pid(backend)
    redis_pid = int(service.context.redis.info("server")["process_id"])
    return {"postgres": postmaster, "redis": redis_pid}


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
    client = Client()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-e2e-") as folder:
            model = Path(folder) / "demo.gguf"
            build_tiny_model(model)
            with LlamaServer(model, n_ctx=CONTEXT) as llama:
                backend = llama.openai_base_url
                with litellm_proxy(backend) as proxy, horde_stack(backend, model) as stack:
                    targets = {"direct": Target(f"{backend}/chat/completions")}
                    targets |= {"litellm": proxy} if proxy is not None else {}
                    legs = interleaved(client, targets | {"horde": stack})
                with horde_stack(backend, model, rate_limits=True) as shipped:
                    paced = client.leg(shipped, SHIPPED_SAMPLES, SHIPPED_PACE)
                    back_to_back = client.leg(shipped, SHIPPED_SAMPLES)
    finally:
        client.close()
    direct, horde, litellm = legs["direct"].times, legs["horde"], legs.get("litellm")
    print(
        f"plain completion of the demo model, {SAMPLES} sequential requests per leg,"
        f" in {ROUNDS} rounds of a block a leg"
    )
    print(f"{'':34} {'p50 ms':>9} {'p99 ms':>9}")
    rows = [("direct (llama-cpp-python)", direct), ("LiteLLM proxy", litellm), ("horde", horde)]
    for label, leg in rows:
        times = leg.times if isinstance(leg, Leg) else leg
        if times is None:
            print(f"{label:34} {'n/a':>9} {'n/a':>9}")
        else:
            print(f"{label:34} {_pct(times, 50):9.2f} {_pct(times, 99):9.2f}")
    print(f"figure: e2e_direct_p50_ms = {_pct(direct, 50):.2f} ms")
    print(f"figure: e2e_direct_p99_ms = {_pct(direct, 99):.2f} ms")
    horde_over = {p: _pct(horde.times, p) - _pct(direct, p) for p in (50, 99)}
    if litellm is None:
        print(f"figure: e2e_litellm_p50_ms = unavailable ({LITELLM_UNAVAILABLE})")
    else:
        print(f"figure: e2e_litellm_p50_ms = {_pct(litellm.times, 50):.2f} ms")
        print(f"figure: e2e_litellm_p99_ms = {_pct(litellm.times, 99):.2f} ms")
    print(f"figure: e2e_horde_p50_ms = {_pct(horde.times, 50):.2f} ms")
    print(f"figure: e2e_horde_p99_ms = {_pct(horde.times, 99):.2f} ms")
    # the overhead: a leg's percentile over the direct call's same percentile
    print(f"figure: e2e_horde_overhead_p50_ms = {horde_over[50]:.2f} ms")
    print(f"figure: e2e_horde_overhead_p99_ms = {horde_over[99]:.2f} ms")
    if litellm is not None:
        litellm_over = {p: _pct(litellm.times, p) - _pct(direct, p) for p in (50, 99)}
        print(f"figure: e2e_litellm_overhead_p50_ms = {litellm_over[50]:.2f} ms")
        print(f"figure: e2e_litellm_overhead_p99_ms = {litellm_over[99]:.2f} ms")
        ratio, ratio_p99 = (horde_over[p] / litellm_over[p] for p in (50, 99))
        print(f"figure: e2e_overhead_ratio_vs_litellm = {ratio:.2f}")
        print(f"figure: e2e_overhead_p99_ratio_vs_litellm = {ratio_p99:.2f}")
        print(f"figure: e2e_litellm_cpu_per_request_ms = {litellm.cpu_ms['proxy']:.2f} ms")
        _print_intervals({"direct": legs["direct"], "litellm": litellm, "horde": horde})
    print(f"figure: e2e_horde_cpu_per_request_ms = {sum(horde.cpu_ms.values()):.2f} ms")
    for part, spent in horde.cpu_ms.items():
        print(f"figure: e2e_horde_cpu_{part}_per_request_ms = {spent:.2f} ms")
    print(
        f"through the horde at the shipped rate limits, {SHIPPED_SAMPLES} sequential requests:"
        f" one every {SHIPPED_PACE:.1f} s (within them), then back to back"
    )
    print(f"figure: e2e_horde_paced_p50_ms = {_pct(paced.times, 50):.2f} ms")
    print(f"figure: e2e_horde_paced_p99_ms = {_pct(paced.times, 99):.2f} ms")
    print(f"figure: e2e_horde_back_to_back_p50_ms = {_pct(back_to_back.times, 50):.2f} ms")
    print(f"figure: e2e_horde_back_to_back_p90_ms = {_pct(back_to_back.times, 90):.2f} ms")
    rate = len(back_to_back.times) / sum(back_to_back.times)
    print(f"figure: e2e_horde_back_to_back_rate = {rate:.2f} requests/s", flush=True)


def _overhead_ratio(p: float) -> Callable[[dict[str, list[float]]], float]:
    """The horde's overhead over LiteLLM's at the ``p``th percentile, from pooled samples."""

    def ratio(times: dict[str, list[float]]) -> float:
        direct = _pct(times["direct"], p)
        litellm = _pct(times["litellm"], p) - direct
        return (_pct(times["horde"], p) - direct) / litellm if litellm > 0 else float("inf")

    return ratio


def _print_intervals(legs: dict[str, Leg]) -> None:
    """Both ratios' 90% intervals over the run's rounds drawn again (``bootstrap_interval``):
    the machine's speed moves within a run and a p99 is the tenth slowest of a leg's
    samples, so one run's ratio is known only so far (docs/performance.md)."""
    rounds = {name: leg.rounds for name, leg in legs.items()}
    print("the ratios' 90% intervals, the run's rounds resampled (a bootstrap):")
    for p, name in (
        (50, "e2e_overhead_ratio_vs_litellm"),
        (99, "e2e_overhead_p99_ratio_vs_litellm"),
    ):
        low, high = bootstrap_interval(rounds, _overhead_ratio(p))
        print(f"figure: {name}_low = {low:.2f}")
        print(f"figure: {name}_high = {high:.2f}")


if __name__ == "__main__":
    main()
