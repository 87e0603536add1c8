"""Jinja2 templates for messages and pages.

HTML templates are always autoescaped. Plain-text message templates (`*.txt`) are not,
because HTML entities in a text message would be wrong; each channel adapter escapes
user-derived text for its own markup instead.

Templates are read once per process (`auto_reload=False`): jinja2 would otherwise stat the
file on every render to see whether it changed, on every message and page. An owner who
rewords a template restarts the server, as for any other configuration change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from bot.runtime.paths import TEMPLATES_DIR
from bot.runtime.text import hang, one_line


def _autoescape(name: str | None) -> bool:
    return not (name or "").endswith(".txt")


def capfirst(text: str) -> str:
    """Upper-case only the first letter, for a name that may open a sentence ("our team" →
    "Our team"); unlike jinja's `capitalize` it leaves the rest alone ("Sam O'Neil", "ACME")."""
    return text[:1].upper() + text[1:]


class Renderer:
    def __init__(self, directory: Path = TEMPLATES_DIR) -> None:
        self.env = Environment(
            loader=FileSystemLoader(str(directory)),
            autoescape=_autoescape,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
            auto_reload=False,
        )
        self.env.filters["hang"] = hang
        self.env.filters["one_line"] = one_line
        self.env.filters["capfirst"] = capfirst

    def render(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(**context)
