"""The page helpers every HTML page shares (bot/web/pages.py), rendered from the real templates."""

from __future__ import annotations

from bot.domain.rendering import Renderer
from bot.web.pages import link_not_valid, status_page


def test_link_not_valid_is_one_404_for_every_kind_of_link() -> None:
    page = link_not_valid(Renderer())
    body = page.body.decode()
    assert page.status_code == 404
    assert "This link is not valid" in body
    assert "Check that you opened the whole link from the message you received." in body
    assert "nonce-" in page.headers["Content-Security-Policy"]
    assert page.headers["Cache-Control"] == "no-store"


def test_status_page_shows_its_title_and_every_line() -> None:
    page = status_page(Renderer(), 410, "This link has expired", "First line.", "Second line.")
    body = page.body.decode()
    assert page.status_code == 410
    assert "This link has expired" in body
    assert "First line." in body and "Second line." in body
