"""One command per service: ``horde-chat migrate``, ``horde-chat native`` and
``horde-chat front`` run as an operator runs them, as processes against HORDE_DATABASE_URL /
HORDE_REDIS_URL (a database of its own on the test Postgres server, the test Redis). A
service refuses to start, with one line on stderr, exit code 1 and no traceback, while its
stores are unreachable or the schema is behind; once migrated it starts, answers /readyz,
logs its requests and stops on SIGTERM.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runtime.front.admission import PARSER_PROCESSES
from runtime.native.db.migrate import current_revision, head_revision, upgrade
from runtime.stores.embedded import EmbeddedStores

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BEHIND = "0003"
UNREACHABLE_POSTGRES = "postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=2"
UNREACHABLE_REDIS = "unix:///nonexistent/redis.sock"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0  # nothing is in flight: no drain to wait for


def command_env(tmp: Path, **horde: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HORDE_")}
    return {**env, "HORDE_DATA_DIR": str(tmp), **horde}


def horde_chat(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_refused(done: subprocess.CompletedProcess[str], service: str, why: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"horde-chat {service}: refused to start: ")
    assert why in line


class Running:
    """A ``horde-chat`` service process; ``url`` once it printed where it serves."""

    def __init__(
        self, args: list[str], env: dict[str, str], pattern: str, *, own_group: bool = False
    ) -> None:
        """``own_group``: in a session of its own, so a test can signal its process group as
        a terminal does (Ctrl-C: SIGINT to every process of the foreground group)."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=own_group,
        )
        self.stderr: list[str] = []
        lines: queue.Queue[str | None] = queue.Queue()
        self._readers = [
            threading.Thread(target=self._pump, args=(lines,), daemon=True),
            threading.Thread(target=self._drain, daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        while True:
            line = lines.get(timeout=START_TIMEOUT)
            if line is None:
                raise AssertionError(f"{args} ended: {''.join(self.stderr)}")
            found = re.search(pattern, line)
            if found:
                self.url = found.group(1)
                return

    def _pump(self, lines: queue.Queue[str | None]) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            lines.put(line)
        lines.put(None)

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def stop(self, ctrl_c: bool = False) -> int:
        """SIGTERM to the process; ``ctrl_c``: SIGINT to its whole group (``own_group``)."""
        if ctrl_c:
            os.killpg(self.process.pid, signal.SIGINT)
        else:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGUSR1)  # runtime.cli: every thread's stack
            time.sleep(2)
            self.process.kill()
            self.process.wait(timeout=10)
            for reader in self._readers:
                reader.join(timeout=10)
            stuck = "".join(self.stderr)[-20000:]
            raise AssertionError(f"{self.process.args} did not stop on SIGTERM:\n{stuck}") from None
        for reader in self._readers:
            reader.join(timeout=10)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
        return code


@pytest.fixture
def fresh_database(horde_stores: EmbeddedStores) -> Iterator[str]:
    """A new database on the test server, migrated to BEHIND (a schema this code outgrew)."""
    name = f"commands_{uuid.uuid4().hex[:12]}"
    admin = create_engine(horde_stores.database_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(horde_stores.database_url).set(database=name)
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_services_refuse_to_start_while_their_stores_are_unreachable(
    horde_stores: EmbeddedStores,
) -> None:
    with tempfile.TemporaryDirectory(prefix="horde-commands-") as tmp:
        both = command_env(
            Path(tmp),
            HORDE_DATABASE_URL=horde_stores.database_url,
            HORDE_REDIS_URL=UNREACHABLE_REDIS,
        )
        assert_refused(horde_chat("native", "--port", "0", env=both), "native", "redis unreachable")
        assert_refused(horde_chat("front", "--port", "0", env=both), "front", "redis unreachable")
        no_postgres = {**both, "HORDE_DATABASE_URL": UNREACHABLE_POSTGRES}
        no_postgres["HORDE_REDIS_URL"] = horde_stores.redis_url
        assert_refused(
            horde_chat("native", "--port", "0", env=no_postgres), "native", "postgres unreachable"
        )
        assert_refused(horde_chat("migrate", env=no_postgres), "migrate", "postgres unreachable")
        unset = command_env(Path(tmp))
        assert_refused(horde_chat("native", env=unset), "native", "HORDE_DATABASE_URL is required")
        assert_refused(horde_chat("front", env=unset), "front", "HORDE_REDIS_URL is required")
        bad_format = {**both, "HORDE_LOG_FORMAT": "xml"}
        assert_refused(horde_chat("native", env=bad_format), "native", "HORDE_LOG_FORMAT")


def test_native_refuses_a_schema_behind_until_migrate_then_both_services_serve_alone(
    horde_stores: EmbeddedStores, fresh_database: str
) -> None:
    upgrade(fresh_database, BEHIND)
    with tempfile.TemporaryDirectory(prefix="horde-commands-") as tmp:
        env = command_env(
            Path(tmp),
            HORDE_DATABASE_URL=fresh_database,
            HORDE_REDIS_URL=horde_stores.redis_url,
            HORDE_SERVICE_PASSKEY="commands-passkey",
        )
        assert_refused(
            horde_chat("native", "--port", "0", env=env),
            "native",
            f"schema behind: the database is at revision {BEHIND}",
        )
        migrated = horde_chat("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr
        assert current_revision(fresh_database) == head_revision()
        again = horde_chat("migrate", env=env)  # nothing left to do is no error
        assert again.returncode == 0, again.stderr

        native = Running(
            ["native", "--host", "127.0.0.1", "--port", "0"],
            env,
            r"native API: (http://127\.0\.0\.1:\d+)/api/v2",
        )
        try:
            front = Running(
                ["front", "--port", "0", "--native-roots", native.url],
                env,
                r"chat front: (http://127\.0\.0\.1:\d+)/v1",
            )
            try:
                for root in (native.url, front.url):
                    ready = httpx.get(root + "/readyz", timeout=10)
                    assert ready.status_code == 200, ready.text
                native.process.send_signal(signal.SIGUSR1)  # prints its stacks, serves on
                models = httpx.get(front.url + "/v1/models", timeout=10)
                assert models.status_code == 200, models.text
                front_id = models.headers["x-request-id"]
            finally:
                assert front.stop() == 0
        finally:
            assert native.stop() == 0
    front_lines = [line for line in front.stderr if line.startswith("front GET /v1/models 200 ")]
    assert len(front_lines) == 1
    assert f"request_id={front_id} " in front_lines[0]
    native_lines = [line for line in native.stderr if " /api/v2/status/models " in line]
    assert len(native_lines) == 1
    assert f"request_id={front_id} " in native_lines[0]
    assert "Traceback" not in "".join(native.stderr + front.stderr)
    assert any(line.startswith("Thread 0x") for line in native.stderr)  # the SIGUSR1 dump


def test_ctrl_c_on_up_stops_everything_without_a_traceback() -> None:
    """A terminal's Ctrl-C is a SIGINT to every process of its foreground group: the front's
    parser processes printed a KeyboardInterrupt traceback each before "stopped", and the
    embedded redis-server shut down at once, before the services that use it (each logged
    it lost). Now only ``up`` takes it, and stops everything in order."""
    with tempfile.TemporaryDirectory(prefix="horde-up-") as tmp:
        env = command_env(Path(tmp), HORDE_NATIVE_PORT="0", HORDE_FRONT_PORT="0")
        up = Running(["up"], env, r"^(ready); Ctrl-C stops everything", own_group=True)
        until_parsers = time.monotonic() + START_TIMEOUT
        while len(_parsers(up.process.pid)) < PARSER_PROCESSES:  # they start after "ready"
            assert time.monotonic() < until_parsers, "the front's parsers never started"
            time.sleep(0.05)
        assert up.stop(ctrl_c=True) == 0
    printed = "".join(up.stderr)
    assert "Traceback" not in printed, printed
    assert "KeyboardInterrupt" not in printed, printed
    assert " lost" not in printed, printed


def _parsers(pid: int) -> list[int]:
    """The front's parser processes under ``pid``: its forkserver's children, from /proc."""
    parents, commands = {}, {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            commands[int(proc.name)] = (proc / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
    servers = {
        child
        for child, parent in parents.items()
        if parent == pid and b"multiprocessing.forkserver" in commands[child]
    }
    return [child for child, parent in parents.items() if parent in servers]


def test_up_prints_the_urls_a_second_service_joins_its_stores_with(
    horde_stores: EmbeddedStores,
) -> None:
    import io

    from runtime.config import Settings
    from runtime.launcher import run_up

    out = io.StringIO()
    stop = threading.Event()
    stop.set()  # print, start no service, stop at once
    with tempfile.TemporaryDirectory(prefix="horde-up-") as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            database_url=horde_stores.database_url,
            redis_url=horde_stores.redis_url,
        )
        kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            assert run_up(settings, out=out, stop_event=stop, starters=[]) == 0
        finally:  # run_up handles both signals in the main thread; give pytest its own back
            for sig, handler in kept.items():
                signal.signal(sig, handler)
    (join,) = [line for line in out.getvalue().splitlines() if line.startswith("join:")]
    assert join.split()[1:] == [
        f"HORDE_DATABASE_URL={horde_stores.database_url}",
        f"HORDE_REDIS_URL={horde_stores.redis_url}",
    ]


def test_up_settles_the_heap_once_its_services_serve(
    horde_stores: EmbeddedStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the last service started and before "ready" (runtime.service_process: what they
    built to serve is out of every later full collection); with no service, nothing to settle."""
    import io

    import runtime.launcher
    from runtime.config import Settings
    from runtime.launcher import run_up

    out = io.StringIO()
    events: list[str] = []
    monkeypatch.setattr(runtime.launcher, "settle", lambda: events.append("settled"))

    class Started:
        def describe(self) -> str:
            events.append("described")
            return "a service"

        def stop(self) -> None:
            events.append("stopped")

    def starter(settings: Settings, stores: EmbeddedStores) -> Started:
        events.append("started")
        return Started()

    stop = threading.Event()
    stop.set()
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with tempfile.TemporaryDirectory(prefix="horde-up-") as tmp:
            settings = Settings(
                data_dir=Path(tmp),
                database_url=horde_stores.database_url,
                redis_url=horde_stores.redis_url,
            )
            assert run_up(settings, out=out, stop_event=stop, starters=[]) == 0
            assert events == []
            assert run_up(settings, out=out, stop_event=stop, starters=[starter, starter]) == 0
    finally:  # run_up handles both signals in the main thread; give pytest its own back
        for sig, handler in kept.items():
            signal.signal(sig, handler)
    started = ["started", "described"] * 2
    assert events == [*started, "settled", "stopped", "stopped"]


def test_a_second_up_on_the_same_data_folder_is_refused_before_it_touches_the_stores() -> None:
    """A second ``make run`` (another terminal, the same folder) started a redis-server on the
    first's socket path, then stopped it and removed the socket: the first lost Redis. Now
    the folder is held by the first ``up``, and the second is one line on stderr, exit 1."""
    from runtime.launcher import data_folder_held

    with tempfile.TemporaryDirectory(prefix="horde-up-") as tmp:
        folder = Path(tmp)
        with data_folder_held(folder):  # as a running ``up`` holds it
            done = horde_chat("up", env=command_env(folder))
            assert_refused(done, "up", f"another horde-chat up (pid {os.getpid()}) is using")
            assert "HORDE_DATA_DIR" in done.stderr
            assert not (folder / "postgres").exists()  # no store was started
            assert not (folder / "redis").exists()
        with data_folder_held(folder):  # released when its holder ends: held again at once
            pass


def test_a_bad_front_setting_is_refused_before_anything_starts() -> None:
    """``HORDE_FRONT_DEADLINE=abc horde-chat up`` started the stores and the native API, then
    died in a traceback when the front read it. Now ``up`` and ``front`` read the front's
    settings first: one line naming the variable, no store started, Redis not even tried."""
    with tempfile.TemporaryDirectory(prefix="horde-up-") as tmp:
        folder = Path(tmp)
        done = horde_chat("up", env=command_env(folder, HORDE_FRONT_DEADLINE="abc"))
        assert_refused(done, "up", "HORDE_FRONT_DEADLINE must be a number, got 'abc'")
        assert not (folder / "postgres").exists()
        assert not (folder / "redis").exists()
        # Redis on a port nothing listens on: the bad setting is what is refused, not Redis
        front = command_env(folder, HORDE_REDIS_URL="redis://127.0.0.1:9/0", HORDE_FRONT_POLL="0")
        done = horde_chat("front", env=front)
        assert_refused(done, "front", "HORDE_FRONT_POLL must be greater than 0, got '0'")
        roots = command_env(folder, HORDE_REDIS_URL="redis://127.0.0.1:9/0")
        done = horde_chat("front", "--native-roots", "127.0.0.1:7001", env=roots)
        assert_refused(done, "front", "HORDE_FRONT_NATIVE_ROOTS must be an http:// or https://")


def test_a_taken_port_refuses_a_service_naming_the_setting_that_moves_it(
    horde_stores: EmbeddedStores,
) -> None:
    """Not a traceback (``OSError: [Errno 98] Address already in use``), and ``up`` stops
    what it started before the port was refused."""
    from runtime.listening import bind

    taken = bind("127.0.0.1", 0)
    port = str(taken.getsockname()[1])
    try:
        with tempfile.TemporaryDirectory(prefix="horde-commands-") as tmp:
            stores = command_env(
                Path(tmp),
                HORDE_DATABASE_URL=horde_stores.database_url,
                HORDE_REDIS_URL=horde_stores.redis_url,
            )
            assert_refused(
                horde_chat("native", "--port", port, env=stores),
                "native",
                f"127.0.0.1:{port} is already in use by another process; --port or "
                "HORDE_NATIVE_PORT picks another",
            )
            assert_refused(
                horde_chat("front", "--port", port, env=stores),
                "front",
                "--port or HORDE_FRONT_PORT picks another",
            )
            up = horde_chat(
                "up", env={**stores, "HORDE_FRONT_PORT": port, "HORDE_NATIVE_PORT": "0"}
            )
            assert up.returncode == 1, (up.stdout, up.stderr)
            assert "Traceback" not in up.stderr, up.stderr
            assert up.stdout.splitlines()[-1] == "stopped"  # the native API it started, stopped
            assert up.stderr.strip().splitlines()[-1] == (
                f"horde-chat up: refused to start: 127.0.0.1:{port} is already in use by another "
                "process; HORDE_FRONT_PORT picks another port"
            )
    finally:
        taken.close()
