"""``make docs``: ``generated/docs/`` as a small static site, readable offline.

    python -m codegen.site [OUT]        (default build/docs; not committed)

Each generated Markdown page (the API and its rate limits, the errors, parameters, messages,
features, limits, verification, pricing and configuration tables) becomes ``NAME.html``
beside an ``index.html`` that lists them; every page has the same navigation bar, and a page's
mention of another (``errors.md``, ``generated/docs/errors.md``) becomes a link to it. The
OpenAPI documents are copied into ``openapi/`` and linked from the index. The style sheet is
inline, raw HTML in the Markdown is escaped, and nothing names another host: the folder opens
from the disk with no network.
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "generated" / "docs"
OPENAPI = ROOT / "generated" / "openapi"
DEFAULT_OUT = ROOT / "build" / "docs"
INDEX = "index.html"
TITLE = "horde-chat reference"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 0; color: #1b1b1b; line-height: 1.45; }
nav { background: #f3f4f6; padding: .6em 1.2em; border-bottom: 1px solid #d0d4da; }
nav a { margin-right: 1em; white-space: nowrap; }
nav a.here { font-weight: bold; text-decoration: none; color: inherit; }
main { padding: 0 1.2em 2em; max-width: 72em; }
table { border-collapse: collapse; margin: 1em 0; font-size: .92em; }
th, td { border: 1px solid #d0d4da; padding: .3em .5em; vertical-align: top; text-align: left; }
th { background: #f3f4f6; }
code { background: #f3f4f6; padding: 0 .2em; border-radius: 3px; font-size: .92em; }
pre { background: #f3f4f6; padding: .8em; overflow-x: auto; }
pre code { padding: 0; }
""".strip()
_MENTION = re.compile(r"<code>(?:generated/docs/)?([a-z0-9_-]+)\.md</code>")
_HEADING = re.compile(r"^# (.+)$", re.MULTILINE)
_HEADER_COMMENT = re.compile(r"\A<!--.*?-->\n")
"""The do-not-edit line codegen puts first (the site is built, never edited either)."""


@dataclass(frozen=True)
class Page:
    name: str
    title: str
    markdown: str

    @property
    def file(self) -> str:
        return f"{self.name}.html"


def pages(docs: Path = DOCS) -> list[Page]:
    """The generated Markdown pages, by name, each titled by its first heading."""
    found = []
    for path in sorted(docs.glob("*.md")):
        text = _HEADER_COMMENT.sub("", path.read_text(encoding="utf-8"), count=1)
        heading = _HEADING.search(text)
        found.append(Page(path.stem, heading.group(1).strip() if heading else path.stem, text))
    return found


def _renderer() -> MarkdownIt:
    # CommonMark with GitHub's tables; raw HTML (the do-not-edit comment) is escaped
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _nav(all_pages: list[Page], here: str) -> str:
    links = [(INDEX, "Index"), *((p.file, p.title) for p in all_pages)]
    return " ".join(
        f'<a href="{file}"{" class=here" if file == here else ""}>{html.escape(title)}</a>'
        for file, title in links
    )


def _document(title: str, nav: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)} · {TITLE}</title>\n"
        f"<style>\n{STYLE}\n</style>\n</head>\n<body>\n"
        f"<nav>{nav}</nav>\n<main>\n{body}</main>\n</body>\n</html>\n"
    )


def _link_mentions(body: str, names: set[str]) -> str:
    def link(match: re.Match[str]) -> str:
        name = match.group(1)
        return f'<a href="{name}.html">{match.group(0)}</a>' if name in names else match.group(0)

    return _MENTION.sub(link, body)


def _index(all_pages: list[Page], openapi: list[str]) -> str:
    items = "".join(
        f'<li><a href="{p.file}">{html.escape(p.title)}</a> (<code>{p.name}.md</code>)</li>\n'
        for p in all_pages
    )
    documents = "".join(
        f'<li><a href="openapi/{name}"><code>{html.escape(name)}</code></a></li>\n'
        for name in openapi
    )
    body = (
        f"<h1>{TITLE}</h1>\n"
        "<p>The reference pages <code>make generate</code> writes from <code>spec/</code> "
        "(<code>generated/docs/</code>), as HTML.</p>\n"
        f"<ul>\n{items}</ul>\n"
        "<h2>OpenAPI 3.1 documents</h2>\n"
        "<p>Each service also serves its own at <code>/openapi.json</code>, browsable at "
        "<code>/docs</code>.</p>\n"
        f"<ul>\n{documents}</ul>\n"
    )
    return _document("Index", _nav(all_pages, INDEX), body)


def build(out: Path = DEFAULT_OUT, docs: Path = DOCS, openapi: Path = OPENAPI) -> list[Path]:
    """Write the site into ``out`` (emptied first); returns the files written."""
    if out.exists():
        shutil.rmtree(out)
    (out / "openapi").mkdir(parents=True)
    all_pages = pages(docs)
    names = {p.name for p in all_pages}
    md = _renderer()
    written = []
    for page in all_pages:
        body = _link_mentions(md.render(page.markdown), names)
        target = out / page.file
        target.write_text(_document(page.title, _nav(all_pages, page.file), body), "utf-8")
        written.append(target)
    documents = sorted(p.name for p in openapi.glob("*.yaml"))
    for name in documents:
        shutil.copyfile(openapi / name, out / "openapi" / name)
        written.append(out / "openapi" / name)
    index = out / INDEX
    index.write_text(_index(all_pages, documents), encoding="utf-8")
    written.append(index)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen.site", description=__doc__)
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    written = build(args.out)
    print(f"wrote {len(written)} files into {args.out} (open {args.out / INDEX})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
