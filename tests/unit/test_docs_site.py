"""``make docs`` (codegen.site): generated/docs/ as a static site that reads offline, every
page reachable from every other, and nothing fetched from another host."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

from codegen import site


class Links(HTMLParser):
    """The href and src values of a page, and whether it has a table."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.tables = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "href" and value is not None:
                self.hrefs.append(value)
            elif name == "src" and value is not None:
                self.srcs.append(value)
        if tag == "table":
            self.tables += 1


def _links(path: Path) -> Links:
    found = Links()
    found.feed(path.read_text(encoding="utf-8"))
    return found


def test_every_generated_page_becomes_html_linked_from_every_page(tmp_path: Path) -> None:
    out = tmp_path / "docs"
    site.build(out)
    names = sorted(p.stem for p in site.DOCS.glob("*.md"))
    assert {"api", "errors", "features", "parameters"} <= set(names)
    html_files = sorted(p.name for p in out.glob("*.html"))
    assert html_files == sorted([site.INDEX, *(f"{n}.html" for n in names)])
    for page in html_files:
        hrefs = set(_links(out / page).hrefs)
        assert {f"{n}.html" for n in names} | {site.INDEX} <= hrefs, page


def test_links_resolve_inside_the_folder_and_nothing_is_remote(tmp_path: Path) -> None:
    out = tmp_path / "docs"
    site.build(out)
    checked = 0
    for page in out.glob("*.html"):
        found = _links(page)
        assert found.srcs == [], page  # no script, image or frame: nothing is fetched
        text = page.read_text(encoding="utf-8")
        assert "<link" not in text, page  # the style is inline
        assert "@import" not in text, page
        for href in found.hrefs:
            parts = urlsplit(href)
            assert (parts.scheme, parts.netloc) == ("", ""), (page.name, href)
            assert (page.parent / parts.path).is_file(), (page.name, href)
            checked += 1
    assert checked > 50
    # the OpenAPI documents are there to read, linked from the index
    index = _links(out / site.INDEX).hrefs
    assert {"openapi/native.yaml", "openapi/front.yaml"} <= set(index)


def test_tables_render_and_mentions_of_a_page_link_to_it(tmp_path: Path) -> None:
    out = tmp_path / "docs"
    site.build(out)
    assert _links(out / "errors.html").tables >= 2
    assert _links(out / "parameters.html").tables >= 1
    # api.md names errors.md in its text: the site links it
    assert '<a href="errors.html"><code>errors.md</code></a>' in (out / "api.html").read_text()
    # the do-not-edit comment is not shown, and raw HTML is never passed through
    for page in out.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "DO NOT EDIT" not in text, page.name
        assert "<!--" not in text, page.name
