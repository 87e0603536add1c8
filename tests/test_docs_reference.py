"""The documentation site's generated reference pages and its navigation.

scripts/docs_hooks.py builds two pages at every `mkdocs build` from the code itself: the
HTTP API reference from the app's OpenAPI schema, and the configuration reference from the
pydantic config models. These tests hold them to the code without running MkDocs: every
operation the app serves and every key a model accepts is on its page, and mkdocs.yml's
nav lists every page under docs/ (a page left out of the nav is unreachable on the site).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import yaml
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = ROOT / "mkdocs.yml"


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_hooks", module)
    spec.loader.exec_module(module)
    return module


def test_the_api_reference_has_every_operation_the_app_serves() -> None:
    docs_hooks = hooks()
    schema = docs_hooks.openapi_schema()
    page = docs_hooks.api_markdown(schema)
    operations = [(method, path) for path, item in schema["paths"].items() for method in item]
    assert len(operations) > 15, operations
    for method, path in operations:
        assert f"## `{method.upper()} {path}`" in page, (method, path)
    for name in schema["components"]["schemas"]:
        assert f"### {name}\n" in page, name


def test_the_api_reference_is_built_from_the_app_the_server_runs() -> None:
    """The same routes `handoff serve --config config.example.yaml` answers (its /api/openapi.json):
    the app built as `serve` builds it (`create_app(desk)`, managing the desk), where the hook
    builds one without the desk's lifecycle, so a route added or dropped by either way shows."""
    from fastapi.testclient import TestClient

    from bot.config import load_config
    from bot.desk import Desk
    from bot.web.app import create_app

    app = create_app(Desk(load_config(ROOT / "config.example.yaml")))  # as bot/cli.py's `serve` builds it
    served = TestClient(app, base_url="http://127.0.0.1:8000").get("/api/openapi.json").json()  # no lifespan: nothing starts
    assert served == hooks().openapi_schema()


def model_keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def test_the_configuration_reference_has_every_key() -> None:
    import bot.desk  # noqa: F401  (registers the sibling-agent channel kind)
    from bot.config import Config, HoursConfig, OpenAIAgentConfig, RouteConfig, RulesAgentConfig, StepConfig, WebhookAgentConfig
    from channels import adapter_class, known_kinds

    page = hooks().config_markdown()
    for key in model_keys(Config):
        assert f"| `{key}` |" in page or f"| `{key}." in page, key
    for agent in (RulesAgentConfig, OpenAIAgentConfig, WebhookAgentConfig):
        for key in model_keys(agent):
            assert f"| `agent.{key}` |" in page, (agent.__name__, key)
    for key in model_keys(RouteConfig):
        assert f"| `routes[].{key}` |" in page, key
    for key in model_keys(StepConfig):
        assert f"| `routes[].steps[].{key}` |" in page, key
    for key in model_keys(HoursConfig):
        assert f"| `hours.<name>.{key}` |" in page, key
    for kind in known_kinds():
        assert f"### `kind: {kind}`" in page, kind
        for key in model_keys(adapter_class(kind).config_model):
            assert f"| `channels[].{key}` |" in page or f"| `channels[].{key}." in page, (kind, key)
    rows = [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in page.splitlines() if line.startswith("| `")]
    assert rows and all(len(row) == 4 for row in rows), "every key's row has its four cells: key, type, default, description"
    untyped = [row[0] for row in rows if not row[1]]
    assert untyped == [], f"keys without a type: {untyped}"


def nav_pages(entries: object) -> list[str]:
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in nav_pages(value)]
    return []


def test_the_nav_lists_every_page_and_the_generated_references() -> None:
    site = yaml.safe_load(MKDOCS.read_text(encoding="utf-8"))
    assert site["docs_dir"] == "docs"
    assert site["strict"] is True
    assert site["hooks"] == ["scripts/docs_hooks.py"]
    listed = nav_pages(site["nav"])
    written = sorted(path.relative_to(ROOT / "docs").as_posix() for path in (ROOT / "docs").rglob("*.md"))
    assert sorted(set(listed) - {hooks().API_PAGE, hooks().CONFIG_PAGE}) == written
    assert {hooks().API_PAGE, hooks().CONFIG_PAGE} <= set(listed)


def test_the_docs_extra_installs_mkdocs_and_the_theme() -> None:
    import tomllib

    docs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["docs"]
    assert any(re.match(r"mkdocs[<>=]", requirement) for requirement in docs), docs
    assert any(requirement.startswith("mkdocs-material") for requirement in docs), docs
