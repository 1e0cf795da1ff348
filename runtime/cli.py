"""The ``horde-chat`` command."""

from __future__ import annotations

import argparse
import faulthandler
import math
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.tables.config import Variable


def finite_number(text: str) -> float:
    """An argument that is a finite number (a NaN or infinite balance is refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_int(text: str) -> int:
    """An argument that is a whole number of at least 1 (a count of processes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is less than 1")
    return value


def or_variable(variable: Variable[Any]) -> str:
    """The help of an option that stands for ``variable``."""
    return f"default {variable.name} or {variable.shown_default}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horde-chat", description="horde-chat services")
    sub = parser.add_subparsers(dest="command", required=True)
    from generated.config import (
        HORDE_FRONT_HOST,
        HORDE_FRONT_PORT,
        HORDE_NATIVE_HOST,
        HORDE_NATIVE_PORT,
        VARIABLES,
    )
    from runtime.tables.config import help_text

    def with_env(name: str, service: str | None, help_line: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help_line,
            epilog=help_text(VARIABLES, service),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    with_env("up", None, "run the whole horde locally (embedded Postgres and Redis)")
    native = with_env(
        "native", "native", "serve the native API alone (HORDE_DATABASE_URL, HORDE_REDIS_URL)"
    )
    native.add_argument("--host", help=or_variable(HORDE_NATIVE_HOST))
    native.add_argument("--port", type=int, help=or_variable(HORDE_NATIVE_PORT))
    native.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        help="server processes sharing the port (default 1; the sweep runs once, in the parent)",
    )
    front = with_env("front", "front", "serve the chat front alone (HORDE_REDIS_URL)")
    front.add_argument("--host", help=or_variable(HORDE_FRONT_HOST))
    front.add_argument("--port", type=int, help=or_variable(HORDE_FRONT_PORT))
    front.add_argument(
        "--native-roots", help="native API roots, comma separated (HORDE_FRONT_NATIVE_ROOTS)"
    )
    front.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        help="server processes sharing the port (default 1)",
    )
    migrate = with_env(
        "migrate", "migrate", "upgrade the schema of HORDE_DATABASE_URL (safe from several hosts)"
    )
    migrate.add_argument("--revision", default="head", help="an Alembic revision (default head)")
    from runtime.worker.config import add_worker_arguments

    add_worker_arguments(sub.add_parser("worker", help="serve chat jobs from an OpenAI backend"))
    users = sub.add_parser("users", help="manage users").add_subparsers(dest="users", required=True)
    create = users.add_parser("create", help="create a user and print its new API key")
    create.add_argument("--name", required=True)
    create.add_argument("--kudos", type=finite_number, default=0)
    create.add_argument("--concurrency", type=int, default=30)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # `kill -USR1 <pid>` prints every thread's stack on stderr: where a stuck service is
    # (POSIX only: Windows, where a volunteer may run the worker, has no SIGUSR1)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    if args.command in ("up", "native", "front", "migrate"):
        return run_service(args)
    if args.command == "worker":
        from runtime.worker.cli import run_worker
        from runtime.worker.config import config_from_args

        return run_worker(config_from_args(args))
    if args.command == "users" and args.users == "create":
        from runtime.config import Settings
        from runtime.users_cli import HordeNotRunning, create_user_command

        try:
            create_user_command(Settings.from_env(), args.name, args.kudos, args.concurrency)
        except HordeNotRunning as refused:
            print(f"horde-chat users create: {refused}", file=sys.stderr)
            return 1
        return 0
    return 2


def run_service(args: argparse.Namespace) -> int:
    """``up``, ``native``, ``front`` or ``migrate``: a refusal is one line on stderr and exit 1."""
    from runtime.config import Settings
    from runtime.launcher import Refused, run_front, run_migrate, run_native, run_up
    from runtime.observability.access_log import log_format

    try:
        settings = Settings.from_env()
        log_format()  # HORDE_LOG_FORMAT: plain or json, checked before anything starts
    except ValueError as bad:
        print(f"horde-chat {args.command}: refused to start: {bad}", file=sys.stderr)
        return 1
    try:
        if args.command == "up":
            return run_up(settings)
        if args.command == "native":
            return run_native(settings, host=args.host, port=args.port, processes=args.processes)
        if args.command == "front":
            return run_front(
                settings,
                host=args.host,
                port=args.port,
                native_roots=args.native_roots,
                processes=args.processes,
            )
        return run_migrate(settings, revision=args.revision)
    except Refused as refused:
        print(f"horde-chat {args.command}: refused to start: {refused}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
