"""Where the data directories live: next to the packages, in a checkout and in a wheel."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # bot/runtime/paths.py → the checkout (or site-packages)
TEMPLATES_DIR = ROOT / "templates"
MIGRATIONS_DIR = ROOT / "migrations"
