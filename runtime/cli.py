"""The ``horde-chat`` command."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horde-chat", description="horde-chat services")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="run the whole horde locally (embedded Postgres and Redis)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "up":
        from codegen.__main__ import main as codegen_main

        return codegen_main(["check"])
    return 2


if __name__ == "__main__":
    sys.exit(main())
