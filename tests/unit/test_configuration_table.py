"""Configuration in one place (issue 16): spec/config.yaml's table (generated/config.py) names
every HORDE_* environment variable the services read, and nothing else; each service's
--help lists its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from generated.config import VARIABLES
from runtime.cli import main

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
READ = re.compile(r"""["'](HORDE_[A-Z0-9_]+)["']""")


def variables_read_by_the_services() -> set[str]:
    return {
        name for path in RUNTIME.rglob("*.py") for name in READ.findall(path.read_text("utf-8"))
    }


def test_every_variable_the_services_read_is_in_the_one_table_and_no_other() -> None:
    table = {v.name for v in VARIABLES}
    assert len(table) == len(VARIABLES)
    assert variables_read_by_the_services() == table


@pytest.mark.parametrize("service", ["native", "front", "migrate"])
def test_each_service_help_lists_its_variables(
    service: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([service, "--help"])
    shown = capsys.readouterr().out
    mine = {v.name for v in VARIABLES if service in v.services}
    assert mine
    for name in mine:
        assert re.search(rf"^\s+{name}\s", shown, re.MULTILINE), name
    others = {v.name for v in VARIABLES} - mine
    assert not {name for name in others if re.search(rf"^\s+{name}\s", shown, re.MULTILINE)}
