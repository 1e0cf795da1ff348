"""``python -m codegen generate|check [--spec DIR] [--out DIR]``."""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from codegen.errors import SpecErrors
from codegen.render import write_all
from codegen.spec import SPEC_ROOT, load_spec
from codegen.targets import build_all

GENERATED = Path(__file__).resolve().parent.parent / "generated"
IGNORED = {"__pycache__"}


def _files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not IGNORED.intersection(p.relative_to(root).parts)
    }


def generate(spec_dir: Path, out_dir: Path) -> int:
    outputs = build_all(load_spec(spec_dir))
    if out_dir.exists():
        for stale in _files(out_dir) - {o.path for o in outputs}:
            (out_dir / stale).unlink()
    write_all(outputs, out_dir)
    print(f"generated {len(outputs)} files into {out_dir}")
    return 0


def check(spec_dir: Path, out_dir: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="horde-chat-generated-") as tmp:
        fresh = Path(tmp)
        write_all(build_all(load_spec(spec_dir)), fresh)
        want, have = _files(fresh), _files(out_dir) if out_dir.exists() else set()
        problems = [f"missing: generated/{p}" for p in sorted(want - have)]
        problems += [
            f"not produced by the spec (stale): generated/{p}" for p in sorted(have - want)
        ]
        problems += [
            f"differs: generated/{p}"
            for p in sorted(want & have)
            if not filecmp.cmp(fresh / p, out_dir / p, shallow=False)
        ]
    if problems:
        print("generated/ is out of step with spec/ and codegen/:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        print("run `make generate` and commit the result", file=sys.stderr)
        return 1
    print(f"generated/ is up to date ({len(want)} files)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    parser.add_argument("command", choices=["generate", "check"])
    parser.add_argument("--spec", type=Path, default=SPEC_ROOT)
    parser.add_argument("--out", type=Path, default=GENERATED)
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            return generate(args.spec, args.out)
        return check(args.spec, args.out)
    except SpecErrors as exc:
        print(f"the spec is invalid ({len(exc.errors)} problem(s)):", file=sys.stderr)
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
