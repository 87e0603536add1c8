"""What every HTML page shares: security headers, the same-origin check, rendering.

Pages are autoescaped jinja2, sent with a strict CSP (scripts only with the per-response
nonce, styles only from this origin), no-referrer (tokens in URLs never leak to other
sites) and no-store (a shared computer's back button shows nothing).
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import urlparse

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from bot.domain.rendering import Renderer


def secure_headers(response: Response, nonce: str | None = None) -> None:
    script = f"'nonce-{nonce}'" if nonce else "'none'"
    response.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src {script}; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"


def render_page(renderer: Renderer, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    context.setdefault("csrf", "")
    response = HTMLResponse(renderer.render(template, nonce=nonce, **context), status_code=status)
    secure_headers(response, nonce)
    return response


def status_page(renderer: Renderer, status: int, title: str, *lines: str, tone: str = "info", **context: Any) -> HTMLResponse:
    """The one-message page (`forms/status.html`) that the return form and the approval pages
    answer with when there is no form to show: a title, a few lines, and nothing returned."""
    context.setdefault("returned", {})
    context.setdefault("missing", [])
    context.setdefault("labels", {})
    return render_page(renderer, "forms/status.html", status=status, title=title, lines=list(lines), tone=tone, **context)


def link_not_valid(renderer: Renderer) -> HTMLResponse:
    """The 404 for a signed link that names nothing: the same page for every kind of link,
    so it does not tell a guesser which kind of token it hit."""
    return status_page(renderer, 404, "This link is not valid",
                       "Check that you opened the whole link from the message you received.")


def _origin(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}"


def same_origin(request: Request, public_url: str) -> bool:
    """Refuse cross-site form posts. Browsers send Sec-Fetch-Site, which is decisive; our
    no-referrer policy makes them send `Origin: null` on form posts, so a null or absent
    Origin leaves the decision to the form's own token."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    return origin in {_origin(public_url), f"{request.url.scheme}://{request.headers.get('host', '')}"}
