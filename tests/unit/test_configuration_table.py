"""Configuration in one place: spec/config.yaml's table (generated/config.py) names every
HORDE_* environment variable the services read, and nothing else, with the type and the
default each is read with; each service's --help lists its own (the internal knobs aside)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from codegen.errors import SpecErrors
from codegen.spec import load_spec
from codegen.targets.config import build as build_config
from generated.config import HORDE_LOG_FORMAT, VARIABLES
from runtime.body_caps import DEFAULT_MAX_BODY_BYTES
from runtime.cli import main
from runtime.config import Settings
from runtime.front.config import FrontConfig
from runtime.observability.access_log import log_format
from runtime.tables.config import bound_variables
from tests.support.spec_edits import replace_once

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime"
SPEC = yaml.safe_load((REPO / "spec" / "config.yaml").read_text("utf-8"))["variables"]
SPELLED = re.compile(r"""["'](HORDE_[A-Z0-9_]+)["']""")

SETTINGS: dict[str, Any] = {
    "Settings": lambda env: Settings.from_env(env),
    "FrontConfig": lambda env: FrontConfig.from_env("unix:///x", env),
}
"""Every settings dataclass a service reads the environment into, built from ``env``."""
READ_ALONE = {HORDE_LOG_FORMAT.name: log_format}
"""Variables read where they are used (each access log reads its format), by name."""
DERIVED = {"HORDE_FRONT_MAX_BODY_BYTES": DEFAULT_MAX_BODY_BYTES}
"""Variables without a default of their own that a service derives one for."""


def spec_default(name: str) -> Any:
    """The value spec/config.yaml gives ``name`` when unset, as the service holds it."""
    entry = SPEC[name]
    if "default" not in entry:
        return DERIVED.get(name)
    value, kind = entry["default"], entry["type"]
    if kind == "path":
        return Path(value)
    if kind == "number":
        return float(value)
    return tuple(value) if isinstance(value, list) else value


def read_from(env: dict[str, str]) -> dict[str, Any]:
    """Every variable's value, by name, as the services read it from ``env``."""
    values = {name: read(env) for name, read in READ_ALONE.items()}
    for build in SETTINGS.values():
        settings = build(env)
        fields = bound_variables(type(settings))
        values.update({v.name: getattr(settings, field) for field, v in fields.items()})
    return values


def test_every_variable_the_services_read_is_in_the_one_table_and_no_other() -> None:
    table = {v.name for v in VARIABLES}
    assert len(table) == len(VARIABLES)
    assert table == set(SPEC)
    assert set(read_from({})) == table
    spelled = {
        name for path in RUNTIME.rglob("*.py") for name in SPELLED.findall(path.read_text("utf-8"))
    }
    assert spelled <= table, "a variable read outside spec/config.yaml"


@pytest.mark.parametrize("unset", [{}, {name: "" for name in SPEC}], ids=["absent", "empty"])
def test_an_unset_variable_is_read_as_the_spec_default(unset: dict[str, str]) -> None:
    read = read_from(unset)
    for name in SPEC:
        want = spec_default(name)
        assert (read[name], type(read[name])) == (want, type(want)), name


def test_each_variable_is_read_by_its_type() -> None:
    read = read_from(
        {
            "HORDE_NATIVE_PORT": "8001",
            "HORDE_DATA_DIR": "/tmp/horde",
            "HORDE_RATE_LIMITS": "OFF",
            "HORDE_IMAGE_FETCH_ALLOW_LOOPBACK": "On",
            "HORDE_RATE_LIMIT_SCALE": "0",
            "HORDE_MODERATION_PATTERNS": "one\n\ntwo",
            "HORDE_PUBLIC_URL": "http://horde.example/",
            "HORDE_LOG_FORMAT": "JSON",
            "HORDE_FRONT_NATIVE_ROOTS": " http://a:1/ ,, http://b:2",
            "HORDE_FRONT_DEADLINE": "1.5",
            "HORDE_FRONT_GLOBAL": "64.9",
            "HORDE_FRONT_FORWARDED_ALLOW_IPS": " 10.0.0.7, ,10.0.0.8",
        }
    )
    assert read["HORDE_NATIVE_PORT"] == 8001
    assert read["HORDE_DATA_DIR"] == Path("/tmp/horde")
    assert read["HORDE_RATE_LIMITS"] is False
    assert read["HORDE_IMAGE_FETCH_ALLOW_LOOPBACK"] is True
    assert read["HORDE_RATE_LIMIT_SCALE"] == 1  # at least 1
    assert read["HORDE_MODERATION_PATTERNS"] == ("one", "two")
    assert read["HORDE_PUBLIC_URL"] == "http://horde.example"
    assert read["HORDE_LOG_FORMAT"] == "json"
    assert read["HORDE_FRONT_NATIVE_ROOTS"] == ("http://a:1", "http://b:2")
    assert read["HORDE_FRONT_DEADLINE"] == 1.5
    assert read["HORDE_FRONT_GLOBAL"] == 64
    assert read["HORDE_FRONT_FORWARDED_ALLOW_IPS"] == ("10.0.0.7", "10.0.0.8")
    # a switch's other words leave its default
    loose = read_from({"HORDE_RATE_LIMITS": "no", "HORDE_IMAGE_FETCH_ALLOW_LOOPBACK": "yes"})
    assert loose["HORDE_RATE_LIMITS"] is True
    assert loose["HORDE_IMAGE_FETCH_ALLOW_LOOPBACK"] is False


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("HORDE_NATIVE_PORT", "x", "HORDE_NATIVE_PORT must be an integer, got 'x'"),
        ("HORDE_SWEEP_SECONDS", "1.5", "HORDE_SWEEP_SECONDS must be an integer, got '1.5'"),
        ("HORDE_FRONT_DEADLINE", "soon", "HORDE_FRONT_DEADLINE must be a number, got 'soon'"),
        ("HORDE_FRONT_GLOBAL", "many", "HORDE_FRONT_GLOBAL must be a number, got 'many'"),
        ("HORDE_LOG_FORMAT", "XML", "HORDE_LOG_FORMAT must be one of plain, json, got 'xml'"),
        # a wait, an interval or a cap of zero or less would hang or refuse every request
        ("HORDE_FRONT_DEADLINE", "0", "HORDE_FRONT_DEADLINE must be greater than 0, got '0'"),
        ("HORDE_FRONT_POLL", "-1", "HORDE_FRONT_POLL must be greater than 0, got '-1'"),
        (
            "HORDE_FRONT_KEEPALIVE",
            "nan",
            "HORDE_FRONT_KEEPALIVE must be a finite number, got 'nan'",
        ),
        ("HORDE_FRONT_GRACE", "inf", "HORDE_FRONT_GRACE must be a finite number, got 'inf'"),
        ("HORDE_FRONT_GLOBAL", "0.5", "HORDE_FRONT_GLOBAL must be greater than 0, got '0.5'"),
        (
            "HORDE_FRONT_PER_SOURCE",
            "1e400",
            "HORDE_FRONT_PER_SOURCE must be a finite number, got '1e400'",
        ),
        (
            "HORDE_FRONT_NATIVE_ROOTS",
            "http://a:1,127.0.0.1:7001",
            "HORDE_FRONT_NATIVE_ROOTS must be an http:// or https:// URL with a host, "
            "got '127.0.0.1:7001'",
        ),
        (
            "HORDE_PUBLIC_URL",
            "ftp://horde.example",
            "HORDE_PUBLIC_URL must be an http:// or https:// URL with a host, "
            "got 'ftp://horde.example'",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(name: str, raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        read_from({name: raw})


@pytest.mark.parametrize("service", ["native", "front", "migrate"])
def test_each_service_help_lists_its_variables(
    service: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([service, "--help"])
    shown = capsys.readouterr().out
    mine = {v.name for v in VARIABLES if service in v.services and not v.internal}
    assert mine
    for name in mine:
        assert re.search(rf"^\s+{name}\s", shown, re.MULTILINE), name
    others = {v.name for v in VARIABLES} - mine
    assert not {name for name in others if re.search(rf"^\s+{name}\s", shown, re.MULTILINE)}


def test_internal_variables_stay_out_of_the_operators_table() -> None:
    page = (REPO / "generated" / "docs" / "config.md").read_text("utf-8")
    internal = {name for name, entry in SPEC.items() if entry.get("internal")}
    assert internal
    for name in SPEC:
        assert (f"`{name}`" in page) is (name not in internal), name


@pytest.mark.parametrize(
    ("old", "new", "path", "problem", "suggestion"),
    [
        (
            "    default: 7001\n",
            '    default: "7001"\n',
            "variables.HORDE_NATIVE_PORT.default",
            "is not of type 'integer'",
            "give a value of type integer",
        ),
        (
            "    type: path\n",
            "    type: paht\n",
            "variables.HORDE_DATA_DIR.type",
            "is not one of",
            "use 'path'",
        ),
        (
            "    at_least: 1\n    internal: true\n",
            "    choices: [a, b]\n    internal: true\n",
            "variables.HORDE_RATE_LIMIT_SCALE.choices",
            "should not be valid",
            "choices belong to a variable of type choice",
        ),
        (
            "    default: plain\n",
            "    default: xml\n",
            "variables.HORDE_LOG_FORMAT.default",
            "'xml' is not one of its choices",
            "use one of: plain, json",
        ),
    ],
    ids=["default-of-another-type", "unknown-type", "choices-off-a-choice", "default-not-a-choice"],
)
def test_a_bad_entry_is_refused_with_file_path_and_suggestion(
    spec_copy: Path, old: str, new: str, path: str, problem: str, suggestion: str
) -> None:
    replace_once(spec_copy / "config.yaml", old, new)
    with pytest.raises(SpecErrors) as info:
        build_config(load_spec(spec_copy))
    (err,) = info.value.errors
    assert (err.file, err.path) == ("spec/config.yaml", path)
    assert problem in err.problem
    assert suggestion in err.suggestion
