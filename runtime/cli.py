"""The ``horde-chat`` command."""

from __future__ import annotations

import argparse
import math
import sys


def finite_number(text: str) -> float:
    """An argument that is a finite number (a NaN or infinite balance is refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horde-chat", description="horde-chat services")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="run the whole horde locally (embedded Postgres and Redis)")
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
    if args.command == "up":
        from runtime.config import Settings
        from runtime.launcher import run_up

        return run_up(Settings.from_env())
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


if __name__ == "__main__":
    sys.exit(main())
