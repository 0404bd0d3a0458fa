"""README.md and docs/ stay a front door with working links inside the repository.

Every relative link in README.md and docs/**/*.md must name a file or folder in
the repository (anchors must name a heading of the target page, with GitHub's
heading slugs); nothing may point outside the checkout (``../shared`` and the
like), and README.md stays at most 250 lines.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files() -> list[Path]:
    """Return README.md and every Markdown file under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """Return (line number, line) pairs outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def links(text: str) -> list[tuple[int, str]]:
    """Return (line number, target) of every inline link and reference definition."""
    found: list[tuple[int, str]] = []
    for n, line in prose_lines(text):
        ref = REF_DEF.match(line)
        if ref:
            found.append((n, ref.group(1)))
            continue
        bare = INLINE_CODE.sub("", line)
        found.extend((n, m.group(1)) for m in INLINE_LINK.finditer(bare))
    return found


def slug(heading: str) -> str:
    """Return GitHub's anchor for a heading's text (before de-duplication)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Return every anchor a Markdown page defines (headings, numbered on repeats)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in prose_lines(text):
        out.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    """Return a description of every relative link of ``page`` that does not resolve."""
    problems: list[str] = []
    for n, target in links(page.read_text(encoding="utf-8")):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # an absolute URL: not a file of this repository
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(ROOT)}:{n}: {target}"
        if not dest.is_relative_to(ROOT):
            problems.append(f"{where} points outside the repository")
            continue
        if not dest.exists():
            problems.append(f"{where} names a missing file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text("utf-8")):
            problems.append(f"{where} names a missing heading")
    return problems


def test_there_are_docs_to_check() -> None:
    pages = doc_files()
    assert (ROOT / "docs" / "architecture.md") in pages
    assert sum(len(links(p.read_text(encoding="utf-8"))) for p in pages) > 20


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_points_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "../shared" not in text
    assert not re.search(r"(?<![\w.])/work/", text)


def test_make_takes_the_nab_corpus_as_a_parameter() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "../shared" not in makefile
    assert "--data $(NAB_DATA)" in makefile


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").resolve()
    linked = {(readme.parent / t.partition("#")[0]).resolve()
              for _, t in links(readme.read_text(encoding="utf-8")) if not SCHEME.match(t)}
    missing = [p.relative_to(ROOT) for p in sorted((ROOT / "docs").glob("*.md")) if p not in linked]
    assert missing == []


@pytest.mark.parametrize(
    ("text", "targets"),
    [
        ("see [a](docs/a.md) and [b](b.md#x)", ["docs/a.md", "b.md#x"]),
        ("`[not](a link)` but [yes](y.md)", ["y.md"]),
        ("```\n[in](fence.md)\n```\n[out](o.md)", ["o.md"]),
        ("[ref]: docs/r.md", ["docs/r.md"]),
        ("![img](pic.png \"title\")", ["pic.png"]),
        ("[**bold** [n]](n.md)", ["n.md"]),
    ],
)
def test_link_extraction(text: str, targets: list[str]) -> None:
    assert [t for _, t in links(text)] == targets


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Routing rules (`infra/pager/routes.yaml`)", "routing-rules-infrapagerroutesyaml"),
        ("The transport: never blocks, spools when the broker is away",
         "the-transport-never-blocks-spools-when-the-broker-is-away"),
        ("Producers: SDK, agent, emit", "producers-sdk-agent-emit"),
        ("GPU occupancy: SM occupancy from NVML GPM", "gpu-occupancy-sm-occupancy-from-nvml-gpm"),
    ],
)
def test_slug(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_broken_links_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Two words\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#two-words) [gone](docs/b.md) [bad anchor](docs/a.md#nope)\n"
        "[out](../shared/DESIGN.md) [web](https://example.org/x.md) [self](#a)\n# A\n"
    )
    found = broken_links(page)
    assert len(found) == 3
    assert "docs/b.md names a missing file" in found[0]
    assert "missing heading" in found[1]
    assert "outside the repository" in found[2]
