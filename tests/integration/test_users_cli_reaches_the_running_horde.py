"""``horde-chat users create`` reaches the stores of the running horde: with no
HORDE_DATABASE_URL and no embedded server running in HORDE_DATA_DIR it refuses, saying how
to fix it, and creates no database there; with the horde's data folder it creates the user
where the native API reads it. Run as a user runs it: the installed command, in a process
of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from runtime.stores.embedded import EmbeddedStores

pytestmark = pytest.mark.integration

COMMAND = [str(Path(sys.executable).with_name("horde-chat")), "users", "create"]


def run_create(data_dir: Path, name: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HORDE_")}
    env["HORDE_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [*COMMAND, "--name", name, "--kudos", "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_users_create_refuses_a_data_folder_no_horde_runs_on(tmp_path: Path) -> None:
    elsewhere = tmp_path / "var"
    done = run_create(elsewhere, "carol")
    assert done.returncode == 1
    assert done.stdout == ""  # no key printed
    assert "make run" in done.stderr
    assert "HORDE_DATABASE_URL" in done.stderr
    assert str(elsewhere.resolve()) in done.stderr
    assert not (elsewhere / "postgres").exists()  # no fresh database was made there


def test_users_create_reaches_the_running_hordes_database(
    horde_stores: EmbeddedStores, native_client: httpx.Client
) -> None:
    assert horde_stores.postgres is not None  # the suite's stores are embedded
    done = run_create(horde_stores.postgres.data_dir.parent, "dave")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()  # the key
    created = re.search(r"user dave#(\d+) created", done.stderr)
    assert created is not None, done.stderr
    found = native_client.get(f"/users/{created.group(1)}")  # read by the running native API
    assert found.status_code == 200
    assert (found.json()["username"], found.json()["kudos"]) == (f"dave#{created.group(1)}", 5)
