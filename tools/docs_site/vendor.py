"""The iframe-worker shim, taken from its npm package when the site is built.

Material's search runs in a web worker, and a browser starts none from a page opened from
the disk; Material's offline plugin therefore loads iframe-worker's shim, by default from a
CDN. The site ships the shim itself instead: ``npm pack`` fetches the pinned package once
into build/vendor/ (the registry checks its integrity), and the site copies the shim.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "iframe-worker"
VERSION = "1.0.4"
FILES = {"shim.js": "package/shim/index.js", "LICENSE": "package/LICENSE"}
"""What the site copies, by its name there, from where in the package."""
CACHE = ROOT / "build" / "vendor" / f"{PACKAGE}-{VERSION}"


def iframe_worker(cache: Path = CACHE) -> Path:
    """The folder holding the shim and its licence, fetched with npm the first time."""
    if all((cache / name).is_file() for name in FILES):
        return cache
    if shutil.which("npm") is None:
        raise RuntimeError(f"npm is needed once to fetch {PACKAGE}@{VERSION} for the site")
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            ["npm", "pack", f"{PACKAGE}@{VERSION}", "--pack-destination", folder, "--silent"],
            check=True,
            capture_output=True,
        )
        (tarball,) = Path(folder).glob("*.tgz")
        cache.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as archive:
            for name, inside in FILES.items():
                member = archive.extractfile(inside)
                if member is None:
                    raise RuntimeError(f"{PACKAGE}@{VERSION} holds no {inside}")
                partial = cache / f"{name}.partial"
                partial.write_bytes(member.read())
                partial.replace(cache / name)
    return cache
