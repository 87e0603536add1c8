"""What a source file imports, read with `ast` (for tests that check how a package is cut)."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside functions and TYPE_CHECKING blocks."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def importers_of(package: Path, library: str) -> list[str]:
    """The modules of `package` (by file stem) that import `library` or one of its submodules."""
    return sorted(path.stem for path in package.glob("*.py")
                  if any(m == library or m.startswith(library + ".") for m in imported_modules(path)))
