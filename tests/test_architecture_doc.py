"""docs/architecture.md stays true to the tree, and the code cites it instead of papers
that are not in the repository.

The document is how a newcomer finds their way, so a path in it that no longer exists
sends them nowhere: every repository path it names (`bot/…`, `channels/…`, `forms/…`,
`templates/…`, `tests/…`, `docs/…`) must exist. A placeholder such as
`channels/<kind>.py` stands for any name and must match at least one file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
README = ROOT / "README.md"

# A repository path: starts at a top-level folder of ours and is not part of a longer path
# or URL ("/chat/api/" is a route, "https://…/bot/" is somebody else's).
PATH = re.compile(r"(?<![\w./<>{}-])((?:bot|channels|forms|templates|tests|docs)/[\w./<>*-]*)")
PLACEHOLDER = re.compile(r"<[^<>/]+>")

# What the project's own sources must not cite: a design paper kept outside the repository,
# or the number of the issue a change came from (the reader has neither).
OUTSIDE_CITATIONS = (
    re.compile(r"\bDESIGN(?:\.md|'s|\s+§)"),
    re.compile(r"\bissues?\s+#?\d+\b", re.IGNORECASE),
)
SOURCE_FOLDERS = ("bot", "channels", "forms", "tests", "migrations", "bench", "scripts")


def paths_in(text: str) -> list[str]:
    """The repository paths written in `text`, in order, without trailing punctuation."""
    return [match.rstrip(".,:;") for match in PATH.findall(text)]


def exists(path: str) -> bool:
    """Whether `path` names something in the repository; a placeholder (`<kind>`) or a
    `*` matches any name, and a trailing `/` must be a folder."""
    pattern = PLACEHOLDER.sub("*", path)
    folder = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    candidates = list(ROOT.glob(pattern)) if "*" in pattern else [ROOT / pattern]
    return any(c.is_dir() if folder else c.exists() for c in candidates)


def test_the_path_reader_finds_paths_and_skips_routes_and_urls() -> None:
    text = ("`bot/domain/handoffs.py`, then bot/, `channels/<kind>.py`. Not /chat/api/ nor "
            "{public_url}/f/{token} nor https://example.com/bot/x.py.")
    assert paths_in(text) == ["bot/domain/handoffs.py", "bot/", "channels/<kind>.py"]


def test_every_path_in_the_architecture_document_exists() -> None:
    written = paths_in(DOC.read_text(encoding="utf-8"))
    assert len(written) > 50, "the reader found too few paths: has the document's style changed?"
    missing = sorted({path for path in written if not exists(path)})
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_readme_links_the_architecture_document() -> None:
    readme = README.read_text(encoding="utf-8")
    section = readme.split("## How it is built", 1)[1].split("\n## ", 1)[0]
    assert "(docs/architecture.md)" in section


def _sources() -> list[Path]:
    own = Path(__file__).resolve()
    return [path for folder in SOURCE_FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))
            if path.resolve() != own]


@pytest.mark.parametrize("pattern", OUTSIDE_CITATIONS, ids=lambda p: p.pattern)
def test_sources_cite_nothing_outside_the_repository(pattern: re.Pattern[str]) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if pattern.search(line)
    ]
    assert found == [], "cite docs/architecture.md or say it in place:\n" + "\n".join(found)
