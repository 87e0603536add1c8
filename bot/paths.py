"""Where the data directories live: next to the packages, in a checkout and in a wheel."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = ROOT / "templates"
MIGRATIONS_DIR = ROOT / "migrations"
