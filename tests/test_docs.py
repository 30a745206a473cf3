"""The README stays short, and every relative link in it and in docs/ leads somewhere:
the file exists, and a `#anchor` into a markdown file names one of its headings. docs/benchmarks.md
stays a short page of today's figures, each section dated and placed, and the README's GPU claim
is the one that page makes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 12_000  # bytes: a newcomer's first screen, not a reference manual
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
BENCHMARKS_LIMIT = 30_000  # bytes: today's figures; earlier runs go to docs/benchmarks-log.md

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


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")  # hex with a digit and a letter
CPU_MODEL = re.compile(r"\b(?:AMD EPYC|Ryzen|Xeon|Core i\d|Apple M\d)\b")
GPU_CARD = re.compile(r"\bNVIDIA [A-Z]+\d+\w*")  # NVIDIA H200, NVIDIA A100, ...
FIGURE = re.compile(r"\d[\d,.]*\s?(?:ms|s|×|%|GB|tokens/s)(?!\w)")


def sections(text: str, level: str = "## ") -> dict[str, str]:
    """Each heading of that level outside code fences, with its text up to the next such heading."""
    found: dict[str, str] = {}
    title, fenced = None, False
    for line in text.splitlines():
        if line.startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and line.startswith(level):
            title = line[len(level):].strip()
            found[title] = ""
        elif title is not None:
            found[title] += line + "\n"
    return found


def missing_placement(body: str) -> list[str]:
    """What a benchmark section lacks of its date, its commit and its machine (a CPU model and
    whether it has AMX, or a GPU card)."""
    machine = bool(GPU_CARD.search(body)) or (bool(CPU_MODEL.search(body)) and "AMX" in body)
    return [what for what, ok in (("a date", DATE.search(body)), ("a commit", COMMIT.search(body)),
                                  ("a machine", machine)) if not ok]


def test_benchmarks_page_is_short_and_every_section_is_dated_and_placed():
    size = len(BENCHMARKS.read_bytes())
    assert size <= BENCHMARKS_LIMIT, (f"docs/benchmarks.md is {size} bytes: keep today's figure per question "
                                      f"and move the run it replaces to docs/benchmarks-log.md (limit {BENCHMARKS_LIMIT})")
    found = sections(BENCHMARKS.read_text())
    assert found
    assert {title: missing_placement(body) for title, body in found.items() if missing_placement(body)} == {}


def readme_gpu_claims(readme: str) -> list[str]:
    """The README's paragraphs that say what a GPU run showed: they name a card, say no GPU has
    run, or quote a figure beside a link to the GPU check."""
    claims = []
    for paragraph in re.split(r"\n\s*\n", FENCE.sub("", readme)):
        prose = re.sub(r"\]\([^)]*\)", "]", paragraph)  # links' targets hold no figures
        if (GPU_CARD.search(paragraph) or re.search(r"\bno GPU\b", paragraph, re.I)
                or ("#gpu-check-" in paragraph and FIGURE.search(prose))):
            claims.append(paragraph)
    return claims


def gpu_claim_problems(readme: str, benchmarks: str) -> list[str]:
    gpu = next((body for title, body in sections(benchmarks).items() if title.startswith("GPU check")), "")
    cards = set(GPU_CARD.findall(gpu))
    problems = []
    for claim in readme_gpu_claims(readme):
        prose = re.sub(r"\]\([^)]*\)", "]", claim)
        if cards and re.search(r"\bno GPU\b", claim, re.I):
            problems.append(f"the README says no GPU has run; the GPU check ran on {sorted(cards)}")
        if set(GPU_CARD.findall(claim)) != cards:
            problems.append(f"the README names {sorted(set(GPU_CARD.findall(claim)))}, the GPU check {sorted(cards)}")
        figures = FIGURE.findall(prose)
        if cards and not figures:
            problems.append("the README's GPU claim quotes no figure of the GPU check")
        problems += [f"the README's GPU figure {figure!r} is not in the GPU check" for figure in figures if figure not in gpu]
    return problems


def test_the_readmes_gpu_claim_is_the_benchmarks_page():
    assert gpu_claim_problems((ROOT / "README.md").read_text(), BENCHMARKS.read_text()) == []


def test_the_gpu_claim_check_catches_a_stale_or_wrong_claim():
    page = "# B\n\n## GPU check: `quickdraft bench passes`\n\nOn an NVIDIA H200: plain 388 ms, draft model 507 ms.\n"
    assert gpu_claim_problems("No GPU has run quickdraft yet ([GPU check](b.md#gpu-check-x)).", page) == [
        "the README says no GPU has run; the GPU check ran on ['NVIDIA H200']",
        "the README names [], the GPU check ['NVIDIA H200']",
        "the README's GPU claim quotes no figure of the GPU check"]
    assert gpu_claim_problems("On an NVIDIA H100 the draft model took 500 ms.", page) == [
        "the README names ['NVIDIA H100'], the GPU check ['NVIDIA H200']",
        "the README's GPU figure '500 ms' is not in the GPU check"]
    assert gpu_claim_problems("On an NVIDIA H200 the draft model took 507 ms against 388 ms plain.", page) == []
    assert gpu_claim_problems("Run `quickdraft bench passes` on a GPU ([GPU check](b.md#gpu-check-x)).", page) == []


def test_the_readmes_headline_runs_are_on_the_benchmarks_page():
    readme = (ROOT / "README.md").read_text()
    headline = readme.split("## Where the numbers are", 1)[1].split("\n## ", 1)[0]
    page = BENCHMARKS.read_text()
    assert [commit for commit in COMMIT.findall(headline) if commit not in page] == []
