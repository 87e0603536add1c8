"""The layers of bot/ (docs/architecture.md, "The layers"): no module imports a layer above its own.

Every module of bot/, channels/ and forms/ is parsed with `ast`, so imports inside functions
and under `if TYPE_CHECKING:` count as much as the ones at the top: each is an arrow a reader
follows. So does a string that is a dotted module path ("bot.flow.siblings", or
"bot.flow.siblings:AgentChannel" as a lazy-import table writes it): `importlib.import_module`
turns it into an import the scan would otherwise not see. channels/ and forms/ sit beside
bot/ and may import its layers 0–5 only; a bot module that imports them must not reach,
through them, a layer above its own.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("bot", "channels", "forms")
BESIDE_BOT = ("channels", "forms")

# Lowest first; a module belongs to the layer whose prefix it starts with.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("errors", ("bot.errors",)),
    ("runtime", ("bot.runtime",)),
    ("config", ("bot.config",)),
    ("store", ("bot.store",)),
    ("delivery", ("bot.delivery",)),
    ("domain", ("bot.domain",)),
    ("tools", ("bot.tools",)),
    ("agents", ("bot.agents",)),
    ("flow", ("bot.flow",)),
    ("wiring", ("bot.desk",)),
    ("web", ("bot.web",)),
    ("clients", ("bot.clients",)),
    ("integrations", ("bot.integrations",)),
    ("entry", ("bot.cli", "bot.demo")),
]
HIGHEST_BESIDE_BOT = 5  # channels/ and forms/ may import errors … domain

# Known upward arrows, (importer, imported) → why it stays for now. Keep this short.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("forms.routes", "bot.web.deps"): "the return-form pages are web routes (layer 10) that the fixed layout keeps in forms/"
                                      " (docs/architecture.md, Layers): they get their services through the web layer's dependencies",
    ("forms.routes", "bot.web.pages"): "… and share the page helpers of the other web pages",
}


@dataclass(frozen=True)
class Arrow:
    """One import: `importer` (at `path:line`) names `imported`, by an import statement or,
    when `how` says so, by a dotted string."""

    path: str
    line: int
    importer: str
    imported: str
    how: str = "imports"


# A whole string that is a dotted path into the project, optionally ":attribute".
DOTTED = re.compile(r"(?:bot|channels|forms)(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PROJECT_PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def arrows_of(importer: str, source: str, path: str, known: set[str]) -> list[Arrow]:
    """Every import of a project module in `source`; `from a import b` names a.b when b is a module."""
    is_package = path.endswith("__init__.py")
    arrows = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importer's package
                package = importer.split(".")[: len(importer.split(".")) - node.level + is_package]
                base = ".".join([*package, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            named = _named_module(node.value.partition(":")[0], known)
            if named is not None:
                arrows.append(Arrow(path, node.lineno, importer, named, how="names in a string"))
            continue
        else:
            continue
        arrows += [Arrow(path, node.lineno, importer, target) for target in dict.fromkeys(targets)
                   if target.split(".")[0] in PROJECT_PACKAGES]
    return arrows


def _named_module(dotted: str, known: set[str]) -> str | None:
    """The project module a dotted string names: the longest known module it starts with
    ("bot.flow.siblings.AgentChannel" names bot.flow.siblings), or a package of known modules."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known or any(module.startswith(candidate + ".") for module in known):
            return candidate if end > 1 else None
    return None


def layer_of(module: str) -> int | None:
    """The layer number of a bot module, None for channels/, forms/ or a bot module in no layer."""
    if module == "bot":
        return 0  # bot/__init__.py: the package's docstring
    for number, (_, prefixes) in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return number
    return None


def describe(number: int) -> str:
    return f"{LAYERS[number][0]} {number}"


def upward_imports(arrows: list[Arrow]) -> tuple[list[str], set[tuple[str, str]]]:
    """Each arrow that points up, as a message naming the file, the line and both layers,
    and the exceptions that were used (so a stale one can be noticed)."""
    by_importer: dict[str, list[Arrow]] = {}
    for arrow in arrows:
        by_importer.setdefault(arrow.importer, []).append(arrow)

    @functools.cache
    def reach(beside: str, seen: frozenset[str] = frozenset()) -> int:
        """The highest bot layer a channels/ or forms/ module gets to, through its own imports."""
        highest = 0
        for arrow in by_importer.get(beside, []):
            if arrow.imported.split(".")[0] in BESIDE_BOT:
                if arrow.imported not in seen:
                    highest = max(highest, reach(arrow.imported, seen | {beside}))
            else:
                highest = max(highest, layer_of(arrow.imported) or 0)
        return highest

    problems, used = [], set()
    for arrow in arrows:
        where = f"{arrow.path}:{arrow.line}: {arrow.importer}"
        own, target = layer_of(arrow.importer), layer_of(arrow.imported)
        if arrow.importer.split(".")[0] in BESIDE_BOT:
            if target is None or target <= HIGHEST_BESIDE_BOT:
                continue
            problem = f"{where} (beside bot/, may import layers 0–{HIGHEST_BESIDE_BOT}) {arrow.how} {arrow.imported} ({describe(target)})"
        elif own is None:
            problems.append(f"{where} is in no layer: add its folder to LAYERS in tests/test_layers.py")
            continue
        elif target is None:  # a module of channels/ or forms/
            reached = reach(arrow.imported)
            if reached <= own:
                continue
            problem = f"{where} ({describe(own)}) {arrow.how} {arrow.imported}, which reaches {describe(reached)}"
        elif target <= own:
            continue
        else:
            problem = f"{where} ({describe(own)}) {arrow.how} {arrow.imported} ({describe(target)})"
        key = (arrow.importer, arrow.imported)
        if key in EXCEPTIONS:
            used.add(key)
        else:
            problems.append(problem)
    return problems, used


def project_arrows() -> list[Arrow]:
    modules = project_modules()
    known = set(modules)
    return [arrow for module, path in modules.items()
            for arrow in arrows_of(module, path.read_text(), str(path.relative_to(ROOT)), known)]


def test_no_module_imports_a_higher_layer() -> None:
    problems, _ = upward_imports(project_arrows())
    assert problems == [], "upward imports:\n" + "\n".join(problems)


def test_every_known_exception_is_still_needed() -> None:
    _, used = upward_imports(project_arrows())
    assert set(EXCEPTIONS) - used == set(), "exceptions in tests/test_layers.py that no import needs any more"


def test_the_scan_sees_every_package_of_the_layers() -> None:
    modules = project_modules()
    assert {layer_of(module) for module in modules if module.startswith("bot")} == set(range(len(LAYERS)))


def test_an_upward_import_inside_a_function_is_reported_with_file_line_and_layers() -> None:
    source = "def later():\n    from bot.web.app import create_app\n"
    arrows = arrows_of("bot.store.models", source, "bot/store/models.py", {"bot.web.app"})
    problems, _ = upward_imports(arrows)
    assert problems == ["bot/store/models.py:2: bot.store.models (store 3) imports bot.web.app (web 10)"]


def test_a_type_checking_import_upward_is_still_an_arrow() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bot.desk import Desk\n"
    problems, _ = upward_imports(arrows_of("bot.domain.handoffs", source, "bot/domain/handoffs.py", set()))
    assert problems == ["bot/domain/handoffs.py:3: bot.domain.handoffs (domain 5) imports bot.desk (wiring 9)"]


def test_a_provider_may_not_import_above_the_domain() -> None:
    source = "from bot.flow.router import Router\n"
    problems, _ = upward_imports(arrows_of("channels.slack", source, "channels/slack.py", set()))
    assert problems == ["channels/slack.py:1: channels.slack (beside bot/, may import layers 0–5) imports bot.flow.router (flow 8)"]


def test_a_lower_layer_may_not_reach_higher_through_channels() -> None:
    arrows = [
        *arrows_of("bot.store.models", "from channels import base\n", "bot/store/models.py", {"channels.base"}),
        *arrows_of("channels.base", "from bot.domain import handoffs\n", "channels/base.py", {"bot.domain.handoffs"}),
    ]
    problems, _ = upward_imports(arrows)
    assert problems == ["bot/store/models.py:1: bot.store.models (store 3) imports channels.base, which reaches domain 5"]


def test_from_package_import_module_names_the_module() -> None:
    arrows = arrows_of("bot.desk", "from bot.store import audit, models\n", "bot/desk.py", {"bot.store.audit", "bot.store.models"})
    assert [arrow.imported for arrow in arrows] == ["bot.store.audit", "bot.store.models"]


def test_a_dotted_string_naming_a_higher_layer_is_an_arrow() -> None:
    """A lazy-import table ("module:Class") is an import the statements do not show."""
    source = 'ADAPTERS = {"agent": "bot.flow.siblings:AgentChannel"}\n'
    arrows = arrows_of("channels", source, "channels/__init__.py", {"bot.flow.siblings", "channels.slack"})
    problems, _ = upward_imports(arrows)
    assert problems == [
        "channels/__init__.py:1: channels (beside bot/, may import layers 0–5) names in a string bot.flow.siblings (flow 8)"
    ]


def test_import_module_of_a_higher_layer_is_an_arrow() -> None:
    source = "import importlib\n\ndef later():\n    return importlib.import_module('bot.web.app')\n"
    problems, _ = upward_imports(arrows_of("bot.store.models", source, "bot/store/models.py", {"bot.web.app"}))
    assert problems == ["bot/store/models.py:4: bot.store.models (store 3) names in a string bot.web.app (web 10)"]


def test_strings_that_only_look_dotted_are_not_arrows() -> None:
    source = 'LOGGER = "bot.nothing_here"\nTEXT = "see bot.web.app for the routes"\nFILE = "bot/web/app.py"\n'
    assert arrows_of("bot.store.models", source, "bot/store/models.py", {"bot.web.app"}) == []


# Agent frameworks, optional extras: only bot/integrations/ may import them, so the desk itself
# (and every other client) runs without them installed.
FRAMEWORKS = ("langgraph", "langchain_core", "pydantic_ai", "agents")


def test_only_the_integrations_import_an_agent_framework() -> None:
    found = []
    for module, path in project_modules().items():
        if module.startswith("bot.integrations"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in names
                      if name.split(".")[0] in FRAMEWORKS]
    assert found == [], "an agent framework imported outside bot/integrations/:\n" + "\n".join(found)

