"""The shell blocks of README.md and of every page of the documentation site (docs/**/*.md),
run as a reader pastes them, so neither the front page nor the site can rot.

Every ```sh, ```bash, ```shell or ```console block (and an unlabelled block that starts with
a `$ ` prompt) is run here, unless the line just above its fence says why not:
`<!-- readme: not run — <the reason> -->`. A new block therefore runs or gives its reason.
The pages MkDocs generates at build time (scripts/docs_hooks.py) hold no shell blocks.

- A script block runs with `bash -euo pipefail` from a scratch copy of the repository (a
  fresh clone), with this environment's `handoff` first on PATH. Its `# → ` comments are what
  it prints: each must match a line of its output, in order, `…` standing for any text. A run
  block must show something it prints, or nothing of its output would be checked.
- Two things differ from what the reader pastes, both in `pasted_as_run`: the line
  `B=http://127.0.0.1:8000` names a fresh `handoff serve --config config.example.yaml`
  started in that copy on a free port (8000 may be taken where the tests run), and
  `handoff demo` runs with `--pause 0` (its pauses are for a person reading along).
- A transcript (`$ command`, then what it prints) runs in the copy, next to the files it
  takes for granted (TRANSCRIPT_FILES), and must print exactly that.

Blocks that are not run are still read: the `handoff` commands they (and the tables of
commands, such as docs/cli.md's) show must exist with those options, and the repository files
they name must exist.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import typer

from bot.cli import app as handoff_app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The front page, then the site's pages in a stable order.
DOCUMENTS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 300

SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")
MARKER_START = "<!-- readme:"
NOT_RUN = re.compile(r"^<!-- readme: not run — (?P<reason>\S.*?) -->$")
PRINTS = "# → "
SERVED_LINE = "B=http://127.0.0.1:8000"
STORY_PAGE = "docs/getting-started.md"
STORY_SECTION = "Drive it through the API"

# Files the README's transcripts take for granted (`$ handoff check-config bad.yaml`).
TRANSCRIPT_FILES = {
    "bad.yaml": "handoff: {idle_timeout: forever}\n"
                "channels:\n"
                "  - {id: 1, kind: owner_inbox, label: Owner inbox}\n"
                "  - {id: 2, kind: owner_inbx, label: Backup inbox}\n"
                "  - {id: 3, kind: slack, label: Sales, bot_token: xoxb-1, channel: C0123}\n",
}


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@dataclass(frozen=True)
class Block:
    """One fenced block of README.md or of a page under docs/."""

    path: str  # the file, relative to the repository: README.md, docs/routes.md, …
    line: int  # the opening fence's line, 1-based
    section: str  # the `## ` heading above it (the page's `# ` title before the first one)
    lang: str
    body: tuple[str, ...]
    marker: str | None  # the line just above the fence, when it is a `<!-- readme: … -->` comment

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}-" + re.sub(r"[^a-z0-9]+", "-", self.section.lower()).strip("-")

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGUAGES or (not self.lang and bool(self.body) and self.body[0].startswith("$ "))

    @property
    def is_transcript(self) -> bool:
        return self.is_shell and bool(self.body) and self.body[0].startswith("$ ")

    @property
    def is_run(self) -> bool:
        """Not marked `not run`: this test runs it (if it shows what it prints)."""
        return self.is_shell and self.marker is None

    def prints(self) -> list[tuple[int, str]]:
        """The `# → ` lines: (line in the file, what is printed)."""
        return [(self.line + 1 + n, text[len(PRINTS):]) for n, text in enumerate(self.body) if text.startswith(PRINTS)]

    def commands(self) -> list[str]:
        """The lines a shell runs, without comments and `# → ` lines."""
        return [text for text in self.body if text.strip() and not text.lstrip().startswith("#")]


def doc_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file."""
    lines = lines_of(path)
    blocks, section, opened, lang = [], "", None, ""
    for number, text in enumerate(lines, start=1):
        if opened is None:
            if text.startswith("## ") or (text.startswith("# ") and not section):
                section = text.lstrip("#").strip()
            elif fence := FENCE.match(text):
                opened, lang = number, fence["lang"]
        elif text == "```":
            above = lines[opened - 2] if opened > 1 else ""
            blocks.append(Block(relative(path), opened, section, lang, tuple(lines[opened:number - 1]),
                                above if above.startswith(MARKER_START) else None))
            opened = None
    assert opened is None, f"{relative(path)}:{opened}: a fence that is never closed"
    return blocks


SHELL_BLOCKS = [block for path in DOCUMENTS for block in doc_blocks(path) if block.is_shell]
# A block that shows nothing it prints is never run (it fails the first test instead): an
# unmarked `pip install` or `handoff serve` must not run here.
def is_story(block: Block) -> bool:
    return (block.path, block.section) == (STORY_PAGE, STORY_SECTION)


RUN_SCRIPTS = [block for block in SHELL_BLOCKS
               if block.is_run and not block.is_transcript and block.prints() and not is_story(block)]
RUN_TRANSCRIPTS = [block for block in SHELL_BLOCKS if block.is_run and block.is_transcript]


def matches(shown: str, printed: str) -> bool:
    """Whether a printed line is the one the page shows, `…` standing for any text."""
    return re.fullmatch(".*".join(re.escape(part) for part in shown.split("…")), printed.rstrip()) is not None


def assert_prints(block: Block, output: str) -> None:
    """Each `# → ` line of the block matches a line of the output, in the page's order."""
    printed = output.splitlines()
    at = 0
    for line, shown in block.prints():
        found = next((n for n in range(at, len(printed)) if matches(shown, printed[n])), None)
        assert found is not None, (f"{block.path}:{line} shows `{PRINTS}{shown}`, but the block printed, after what "
                                   f"matched before it:\n" + "\n".join(printed[at:]))
        at = found + 1


# --------------------------------------------------------------------------- running


def reader_env() -> dict[str, str]:
    """A reader's fresh shell in the activated environment: no HANDOFF_* settings from
    whoever runs the tests (an api.key there would turn every curl into a 401)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HANDOFF_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(COLUMNS="200", NO_COLOR="1")  # a wide terminal: the demo's lines are not wrapped
    for tool in ("curl", "jq"):
        assert shutil.which(tool, path=env["PATH"]), f"the docs' examples use {tool}: install it (.ci/run does)"
    return env


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A scratch copy of the repository's files, as a fresh clone has them (with this
    checkout's edits): blocks may write into it, the served desk keeps handoff.db there."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    copy = tmp_path / "handoff-desk"
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


@contextmanager
def served_desk(clone: Path, env: dict[str, str]) -> Iterator[str]:
    """`handoff serve --config config.example.yaml` in the clone on a free port; yields its
    address once uvicorn says it listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(["handoff", "serve", "--config", "config.example.yaml", "--port", str(port)], cwd=clone,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log: list[str] = []
    listening = threading.Event()

    def read_log() -> None:  # drained to the end, so the server never blocks on a full pipe
        assert server.stdout is not None
        for line in server.stdout:
            log.append(line)
            if "Uvicorn running on" in line:
                listening.set()
        listening.set()  # the server ended

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        assert listening.wait(timeout=60), "handoff serve did not start:\n" + "".join(log)
        assert server.poll() is None, "handoff serve did not start:\n" + "".join(log)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # never leave a server behind
            server.kill()
            server.wait()
        reader.join(timeout=5)


@dataclass(frozen=True)
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str
    desk: str | None  # the served desk's address, while the `with` lasts


def pasted_as_run(line: str, desk: str | None) -> str:
    """What this test runs for one pasted line: the same, but for the two changes in the
    module docstring."""
    if line == SERVED_LINE:
        assert desk is not None
        return f"B={desk}"
    if line.strip() == "handoff demo":
        return line.replace("handoff demo", "handoff demo --pause 0")
    return line


@contextmanager
def running(block: Block, clone: Path) -> Iterator[ScriptRun]:
    """Run a script block; the desk it talks to, if any, is still up inside the `with`."""
    env = reader_env()
    with served_desk(clone, env) if SERVED_LINE in block.body else nullcontext() as desk:
        script = "\n".join(pasted_as_run(line, desk) for line in block.body)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=100)
        yield ScriptRun(done.returncode, done.stdout, done.stderr, desk)


# --------------------------------------------------------------------------- every block


def test_the_documents_are_the_readme_and_the_site_pages() -> None:
    """The parser sees every page: the front page and the site's pages, each with its blocks."""
    names = [relative(path) for path in DOCUMENTS]
    assert names[0] == "README.md"
    for page in ("docs/index.md", "docs/getting-started.md", "docs/channels/telegram.md", "docs/architecture.md"):
        assert page in names, names
    assert {block.path for block in SHELL_BLOCKS} >= {"README.md", STORY_PAGE, "docs/configuration.md"}


def test_the_readme_is_a_front_page() -> None:
    """The README stays a front page: the rest lives in the site, which it links."""
    lines = lines_of(README)
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move sections into docs/ pages"
    linked = set(re.findall(r"\]\((docs/[\w./-]+\.md)(?:#[\w-]*)?\)", README.read_text(encoding="utf-8")))
    missing = sorted(page for page in linked if not (ROOT / page).is_file())
    assert not missing, f"README.md links pages that do not exist: {missing}"
    assert "docs/getting-started.md" in linked, linked


def test_every_shell_block_is_run_or_says_why_not() -> None:
    """So a new block cannot dodge the test: it is run (and shows what it prints), or it says why not."""
    above_shell_blocks = {(block.path, block.line - 1) for block in SHELL_BLOCKS}
    for path in DOCUMENTS:
        for number, text in enumerate(lines_of(path), start=1):
            if text.startswith(MARKER_START):
                where = f"{relative(path)}:{number}"
                assert NOT_RUN.match(text), f"{where}: write `<!-- readme: not run — <the reason> -->`, got {text!r}"
                assert (relative(path), number) in above_shell_blocks, (
                    f"{where}: a `not run` comment belongs just above a shell block's fence")
    assert SHELL_BLOCKS, "the documents have no shell blocks: has the parser broken?"
    for block in SHELL_BLOCKS:
        if not block.is_run:
            continue
        where = f"{block.where} ({block.section or 'top'})"
        assert block.is_transcript or block.prints(), (
            f"{where}: a block that is run shows what it prints (`{PRINTS}…` lines), or add a `not run` comment saying why")
        for command in block.commands():
            assert "127.0.0.1:8000" not in command or command == SERVED_LINE, (
                f"{where}: reach the desk through `$B` (set by `{SERVED_LINE}`), so the test can serve it: {command!r}")


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name) for b in RUN_SCRIPTS])
def test_script_block_prints_what_it_shows(block: Block, clone: Path) -> None:
    with running(block, clone) as run:
        assert run.returncode == 0, f"{block.where} failed as pasted:\n{run.stdout}\n{run.stderr}"
        assert_prints(block, run.stdout)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name) for b in RUN_TRANSCRIPTS])
def test_transcript_prints_exactly_what_it_shows(block: Block, clone: Path) -> None:
    for name, text in TRANSCRIPT_FILES.items():
        (clone / name).write_text(text)
    steps: list[tuple[str, list[str]]] = []
    for text in block.body:
        if text.startswith("$ "):
            steps.append((text[2:], []))
        else:
            steps[-1][1].append(text)
    for command, shown in steps:
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=reader_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)
        printed = done.stdout.rstrip("\n").splitlines()
        difference = f"{block.where}: `$ {command}` shows\n" + "\n".join(shown) + "\nbut printed\n" + "\n".join(printed)
        assert len(printed) == len(shown), difference
        assert all(map(matches, shown, printed)), difference


# --------------------------------------------------------------------------- the API story


def test_the_api_block_hands_off_once_relays_releases_and_resumes(clone: Path) -> None:
    """The story the block teaches, read back from the desk it ran against: one handoff, the
    relayed message, the owner's release with the returned data, one resume message."""
    [block] = [b for b in SHELL_BLOCKS if is_story(b)]
    assert block.is_run, "the API block is run, against the served desk"
    assert block.prints(), "the API block is run, against the served desk"
    assert SERVED_LINE in block.body, "the API block is run, against the served desk"
    with running(block, clone) as run:
        assert run.returncode == 0, f"{block.where} failed as pasted:\n{run.stdout}\n{run.stderr}"
        assert_prints(block, run.stdout)
        with httpx.Client(base_url=run.desk or "") as desk:
            assert desk.get("/api/handoffs?state=open").json()["handoffs"] == []
            [handoff] = desk.get("/api/handoffs?state=released").json()["handoffs"]
            sid = handoff["handoff_session_id"]
            kinds = [event["kind"] for event in desk.get(f"/api/handoffs/{sid}/events").json()["events"]]
            messages = desk.get(f"/api/conversations/{handoff['conversation_id']}/messages?after=0").json()["messages"]
    assert (handoff["state"], handoff["release_reason"]) == ("released", "owner")
    assert handoff["returned"] == {"order_status": "shipped"}
    assert kinds.count("handoff_requested") == 1, kinds  # the only handoff, asked for once
    assert "relayed_to_recipient" in kinds, kinds
    assert "release_noop" not in kinds, kinds
    relayed = [m for m in messages if m["role"] == "subscriber" and m["handoff_session_id"] == sid]
    assert [m["text"] for m in relayed] == ["It was due last Monday."]
    resumes = [m["text"] for m in messages if m["role"] == "system"]
    assert resumes == ["[Bot resumed — the owner released the conversation. Outcome: resolved. Carrier confirmed.]\n"
                       "Returned data:\n  • order_status: shipped"]


# --------------------------------------------------------------------------- blocks not run


def shown_handoff_commands() -> list[tuple[str, str, str]]:
    """(where, command, text its options are read from): every `handoff …` line of a shell
    block and every table row whose first cell is a `handoff …` command (docs/cli.md's)."""
    found = []
    for block in SHELL_BLOCKS:
        for command in block.commands():
            command = command.removeprefix("$ ").split("  #")[0].strip()
            if command.startswith("handoff "):
                found.append((block.where, command, command))
    for path in DOCUMENTS:
        for number, text in enumerate(lines_of(path), start=1):
            if (row := re.match(r"^\| (?P<cell>(?:\\\||[^|])*)\|", text)) and (command := re.match(r"`(handoff [^`]+)`", row["cell"])):
                found.append((f"{relative(path)}:{number}", command[1], row["cell"]))
    return found


def test_the_handoff_commands_shown_exist_with_their_options() -> None:
    """Blocks that are not run (and the command tables) still name real commands and options."""
    shown = shown_handoff_commands()
    assert any(where for where, command, _ in shown if command.startswith("handoff mcp")), shown
    assert any(where.startswith("docs/cli.md:") for where, _, _ in shown), "docs/cli.md's table of commands is read"
    for where, command, text in shown:
        target = typer.main.get_command(handoff_app)  # a click group (typer's own copy of click)
        for word in command.split()[1:]:
            if word not in getattr(target, "commands", {}):
                break
            target = target.commands[word]
        assert not hasattr(target, "commands"), f"{where}: `{command}` names no command of `handoff`"
        options = {opt for param in target.params for opt in (*param.opts, *param.secondary_opts)}
        unknown = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) - options
        assert not unknown, f"{where}: `handoff {target.name}` has no option {sorted(unknown)}"


def test_the_files_shell_blocks_name_exist() -> None:
    """`--config config.yaml` in a block that is not run would otherwise go unnoticed."""
    named = []
    for block in SHELL_BLOCKS:
        if block.is_transcript:  # its files are TRANSCRIPT_FILES
            continue
        for command in block.commands():
            paths = re.findall(r"(?:--config |check-config )([\w./-]+)", command)
            paths += re.findall(r"(?<![\w./-])((?:\.ci|scripts|tests|bench|docs|migrations)/[\w./-]*\w)", command)
            named += [(block.where, path) for path in paths]
    assert any(path == "config.example.yaml" for _, path in named), named
    missing = [f"{where}: {path}" for where, path in named if not (ROOT / path).exists()]
    assert not missing, missing


def all_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in DOCUMENTS)


def test_the_quick_start_makes_the_virtual_environment_the_docs_run_from() -> None:
    used = set(re.findall(r"(\.venv[\w-]*)/bin/", all_text()))
    made = {made for block in SHELL_BLOCKS for command in block.commands()
            for made in re.findall(r"python3? -m venv (\S+)", command)}
    assert used, f"the docs run {sorted(used)} but no shell block makes it ({sorted(made)})"
    assert used <= made, f"the docs run {sorted(used)} but no shell block makes it ({sorted(made)})"


def test_the_screenshot_refresh_writes_every_screenshot_the_docs_show() -> None:
    shown = set(re.findall(r"screenshots/([\w-]+)\.png", all_text()))
    [refresh] = [command for block in SHELL_BLOCKS for command in block.commands() if "HANDOFF_WRITE_SCREENSHOTS=1" in command]
    written = {name for path in re.findall(r"tests/\S+\.py", refresh)
               for name in re.findall(r'\bshot\(\w+, "([\w-]+)"\)', (ROOT / path).read_text(encoding="utf-8"))}
    assert shown, f"the refresh command ({refresh!r}) does not write {sorted(shown - written)}"
    assert shown <= written, f"the refresh command ({refresh!r}) does not write {sorted(shown - written)}"
