""".ci/run and the quality gates it passes before the tests: ruff and mypy run, fail the run
when they fail, the documentation site builds with `mkdocs build --strict`, and every
`# type: ignore` left in the checked packages says which error it silences and why (mypy
itself only insists on the code)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("bot", "channels", "forms")
# `# type: ignore[code, …]` followed by `  # why`.
EXPLAINED_IGNORE = re.compile(r"# type: ignore\[[a-z0-9-]+(, [a-z0-9-]+)*\]  # \S")


def ci_commands() -> list[str]:
    """.ci/run's commands, one a line, without comments and blank lines."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_ruff_and_mypy_before_the_readme_test_command() -> None:
    commands = ci_commands()
    assert "set -euo pipefail" in commands  # a failing gate stops the run
    assert commands[-1] == "pip install -e '.[test]' && pytest"  # README → the tests
    assert "ruff check ." in commands[:-1]
    assert "mypy" in commands[:-1]


def test_ci_builds_the_documentation_site_strictly_after_the_gates_and_before_the_tests() -> None:
    commands = ci_commands()
    [build] = [command for command in commands if "mkdocs build" in command]
    assert "--strict" in build
    assert "--site-dir" in build  # a temporary folder, not site/ in the clone
    assert commands.index("pip install -q -e '.[docs]'") < commands.index(build)
    assert commands.index("mypy") < commands.index(build) < commands.index("pip install -e '.[test]' && pytest")
    assert "site/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_gates_are_installable_from_the_lint_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lint = project["project"]["optional-dependencies"]["lint"]
    assert any(requirement.startswith("ruff") for requirement in lint)
    assert any(requirement.startswith("mypy") for requirement in lint)
    install = ci_commands().index("pip install -q -e '.[lint]'")
    assert install < ci_commands().index("ruff check .")


def test_mypy_is_strict_on_the_checked_packages() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["packages"] == list(CHECKED)
    assert mypy["strict"] is True
    assert "ignore-without-code" in mypy["enable_error_code"]


def test_every_type_ignore_names_its_code_and_its_reason() -> None:
    files = [path for package in CHECKED for path in sorted((ROOT / package).rglob("*.py"))]
    assert files
    unexplained = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "# type: ignore" in line and not EXPLAINED_IGNORE.search(line)
    ]
    assert unexplained == []
