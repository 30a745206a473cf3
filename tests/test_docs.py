"""The README stays short, and every relative link in it and in docs/ leads somewhere:
the file exists, and a `#anchor` into a markdown file names one of its headings."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 12_000  # bytes: a newcomer's first screen, not a reference manual

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())  # a link's text only
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", page.read_text()), re.M):
        base = slug(heading)
        name, n = base, 0
        while name in found:  # repeated headings get -1, -2, ... as on GitHub
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def broken_links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text()))
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:: not ours to check
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            problems.append(f"{page.name}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{page.name}: {target} (no heading #{anchor} in {linked.name})")
    return problems


def test_readme_is_short():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move detail into docs/ (limit {README_LIMIT})"


def test_every_relative_link_resolves():
    assert (ROOT / "docs").is_dir()
    problems = [problem for page in pages() for problem in broken_links(page)]
    assert problems == []


def test_every_doc_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert [doc.name for doc in pages()[1:] if f"docs/{doc.name}" not in readme] == []


def test_the_checker_catches_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## Typing session (`quickdraft bench session`)\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#typing-session-quickdraft-bench-session) [gone](missing.md) "
                    "[no heading](other.md#nowhere) [self](#page) ![img](pic.png) [web](https://example.com)\n"
                    "# Page\n```sh\n[in code](ignored.md)\n```\n`[in a span](ignored.md)`\n")
    assert broken_links(page) == ["page.md: missing.md (no such file)",
                                  "page.md: other.md#nowhere (no heading #nowhere in other.md)",
                                  "page.md: pic.png (no such file)"]


def test_slugs_follow_github():
    assert slug("GPU check: `quickdraft bench passes`") == "gpu-check-quickdraft-bench-passes"
    assert slug("Weights in int8 (the CPU default)") == "weights-in-int8-the-cpu-default"
    assert slug("Teams: completions from a shared inference server") == "teams-completions-from-a-shared-inference-server"
