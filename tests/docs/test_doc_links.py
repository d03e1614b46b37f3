"""Links in README.md, docs/ and benchmarks/ against the tree: a reader who follows one lands somewhere.

Every relative link (outside code) names a file or folder that exists, and every `#anchor`
names a heading of the Markdown file it points into, slugged as GitHub renders it. Benchmark
evidence moves between folders and sections are renamed; a link left behind is a dead end.
"""

import re
from pathlib import Path

from _util import REPO

CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    seen, out = {}, set()
    for heading in HEADING.findall(text):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers repeated headings
    return out


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "benchmarks").glob("*.md"))]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(CODE.sub("", path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {file_part or path.name})")
    return broken


def test_the_slug_matches_githubs():
    assert slug("The proving preset: the paper's §5.1 where the proving ground allows") == \
        "the-proving-preset-the-papers-51-where-the-proving-ground-allows"
    assert slug("Overlap or serial: `--speed.schedule`") == "overlap-or-serial---speedschedule"
    assert slug("AVX2 cores without native bf16 (2026-11-25)") == "avx2-cores-without-native-bf16-2026-11-25"


def test_a_dead_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n[ok](a.md#title) [gone](b.md) [moved](a.md#old-section) "
                                   "`[in code](nowhere.md)` [web](https://example.com/x)\n")
    assert broken_links(tmp_path / "a.md") == ["b.md (no such file)",
                                                "a.md#old-section (no heading #old-section in a.md)"]


def test_every_relative_link_in_the_docs_resolves():
    found = {str(p.relative_to(REPO)): b for p in doc_files() if (b := broken_links(p))}
    assert not found, f"links that lead nowhere (fix the link, or the heading it names): {found}"
