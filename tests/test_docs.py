"""Every relative link in the repository's Markdown leads somewhere.

The README is a front page and the rest lives in docs/ by subject, so links cross files and
point at headings; a moved section or a renamed heading breaks them silently. This reads every
`*.md` file of the repository, finds its links (outside code), and checks that each relative target exists
and that each `#anchor` names a heading (or an `<a id>`/`<a name>`) of the file it points into.
Anchors are computed as GitHub computes them (github-slugger, https://github.com/Flet/github-slugger):
the heading's text, lowercased, punctuation other than `-` and `_` removed, each space a hyphen,
the n-th repeat suffixed `-n`.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_DIRS = {"node_modules", ".venv", ".git", ".peers"}

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_CODE_SPAN = re.compile(r"(`+)((?:(?!\n[ \t]*\n).)+?)\1", re.DOTALL)  # within a paragraph
# [text](target "title") and ![alt](target); the text may hold one level of brackets and run
# over a line break.
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]\n]|\n(?![ \t]*\n)|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*<?([^\s>]+)>?", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a\s[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_HTML_TAG = re.compile(r"<[^>]+>")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)  # http:, https:, mailto:…
# What github-slugger removes: everything but letters, marks, numbers, connector punctuation
# (`_`), spaces and hyphens. Python's \w is letters, digits and `_` (plus marks, close enough).
_NOT_SLUG = re.compile(r"[^\w\- ]")


def markdown_files() -> list[Path]:
    """The repository's Markdown files: tracked, or new and not ignored (all `*.md` under the root
    when git cannot say); never those of installed packages (`node_modules`, `.venv`)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\0")
        paths = [ROOT / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):
        paths = list(ROOT.rglob("*.md"))
    return sorted(
        path for path in paths
        if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts)
    )  # fmt: skip


def slug(heading: str) -> str:
    """A heading's anchor without the duplicate suffix, as GitHub makes it."""
    text = _CODE_SPAN.sub(lambda match: match.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading reads as its text
    text = _HTML_TAG.sub("", text)
    return _NOT_SLUG.sub("", text.strip().lower()).replace(" ", "-")


@dataclass
class Page:
    anchors: set[str]
    links: list[tuple[int, str]]  # (line number, target)


def read_page(text: str) -> Page:
    """The anchors a Markdown text defines and the links it holds, code left out."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}

    def heading(title: str) -> None:
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")

    prose: list[str] = []  # the text with code blocks blanked, one entry per line
    fence: str | None = None
    previous = ""  # the last line of a paragraph, which a setext underline makes a heading
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
            prose.append("")
            continue
        if opening:
            fence, previous = opening.group(1), ""
            prose.append("")
            continue
        if line.startswith(("    ", "\t")) and not previous.strip():
            prose.append("")  # an indented code block
            continue
        atx = _ATX.match(line)
        if atx:
            heading(atx.group(2) or "")
        elif _SETEXT.match(line) and _is_paragraph_line(previous):
            heading(previous)
            line = ""
        anchors.update(_HTML_ANCHOR.findall(line))
        prose.append(line)
        previous = line

    # Links and code spans may run over a line break (not a blank line): read the text whole,
    # code spans blanked but for their line breaks, so that offsets still give line numbers.
    body = _CODE_SPAN.sub(lambda match: "\n" * match.group(0).count("\n"), "\n".join(prose))
    found = [*_INLINE_LINK.finditer(body), *_REFERENCE_DEFINITION.finditer(body)]
    found.sort(key=lambda match: match.start())
    return Page(
        anchors, [(body.count("\n", 0, match.start()) + 1, match.group(1)) for match in found]
    )


def _is_paragraph_line(line: str) -> bool:
    stripped = line.strip()
    return (
        bool(stripped)
        and not stripped.startswith(("#", "|", ">", "-", "*", "+", "<"))
        and not re.match(r"\d+[.)]\s", stripped)
    )


def broken_links(files: list[Path], root: Path = ROOT) -> list[str]:
    """One line per link that leads nowhere: `file:line: target (why)`."""
    root = root.resolve()
    pages: dict[Path, Page] = {}

    def page(path: Path) -> Page:
        if path not in pages:
            pages[path] = read_page(path.read_text(encoding="utf-8"))
        return pages[path]

    problems: list[str] = []
    for source in files:
        where = source.resolve().relative_to(root)
        for number, target in page(source).links:
            if not target or _EXTERNAL.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            destination = (source.parent / unquote(path_part)).resolve() if path_part else source
            if not destination.is_relative_to(root):
                problems.append(f"{where}:{number}: {target} (outside the repository)")
                continue
            if not destination.exists():
                problems.append(f"{where}:{number}: {target} (no such file)")
                continue
            if (
                anchor
                and destination.suffix == ".md"
                and unquote(anchor) not in page(destination).anchors
            ):
                problems.append(
                    f"{where}:{number}: {target} (no heading or anchor #{anchor} there)"
                )
    return problems


def test_every_relative_link_and_anchor_in_the_markdown_resolves() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files and any(path.parent.name == "docs" for path in files), files
    problems = broken_links(files)
    assert not problems, "broken links in the Markdown:\n" + "\n".join(problems)


def test_anchors_are_computed_as_github_computes_them() -> None:
    page = read_page(
        "# ResponseKit\n"
        "## Claude Code and the Messages API\n"
        "## The corpus (`tests/data/formats/`)\n"
        "## Replicas: an event on one replica (`bench/replicas.py`)\n"
        "### 2026-11-22\n"
        "## State\n## State\n## State\n"
        "## What *it* costs, [roughly](x.md)\n"
        "Setext heading\n--------------\n"
        '<a id="custom-anchor"></a>\n'
        "```\n# not a heading\n```\n"
    )
    assert page.anchors == {
        "responsekit",
        "claude-code-and-the-messages-api",
        "the-corpus-testsdataformats",
        "replicas-an-event-on-one-replica-benchreplicaspy",
        "2026-11-22",
        "state", "state-1", "state-2",
        "what-it-costs-roughly",
        "setext-heading",
        "custom-anchor",
    }  # fmt: skip


def test_the_checker_reports_missing_files_and_anchors_and_skips_code(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "other.md").write_text("# Other\n## A section\n")
    page = docs / "page.md"
    page.write_text(
        "# Page\n"
        "[fine](other.md#a-section) [here](#page) [web](https://example.com/x#y) [mail](mailto:a@b.c)\n"
        "[gone](missing.md) [bad anchor](other.md#no-such-section) [bad here](#nowhere)\n"
        "a link whose text [runs over\na line break](#broken-over-lines), and `code that\nruns over one`\n"
        "`[in a code span](missing.md)`\n"
        "```md\n[in a fence](missing.md)\n```\n"
        "[ref]: other.md#also-missing\n"
    )
    (tmp_path / "outside.md").write_text("# Outside\n")
    page.write_text(page.read_text() + "[up](../outside.md)\n")
    problems = broken_links([page], root=docs)
    assert problems[0].startswith("page.md:3: ") and problems[3].startswith("page.md:4: "), problems
    problems = [line.split(": ", 1)[1] for line in problems]
    assert problems == [
        "missing.md (no such file)",
        "other.md#no-such-section (no heading or anchor #no-such-section there)",
        "#nowhere (no heading or anchor #nowhere there)",
        "#broken-over-lines (no heading or anchor #broken-over-lines there)",
        "other.md#also-missing (no heading or anchor #also-missing there)",
        "../outside.md (outside the repository)",
    ]
