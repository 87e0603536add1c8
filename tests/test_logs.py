"""Logs never carry provider tokens, whoever writes the line."""

from __future__ import annotations

import subprocess
import sys

from bot.runtime.logs import redact

TG = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"


def test_tokens_are_masked() -> None:
    assert redact(f"POST https://api.telegram.org/bot{TG}/getMe") == "POST https://api.telegram.org/bot<redacted>/getMe"
    assert redact("token xoxb-1234-5678-abcdefghijkl refused") == "token <redacted> refused"
    assert redact("Authorization: Bearer s3cr3t-value-here") == "Authorization: Bearer <redacted>"
    assert redact("order 1234 shipped") == "order 1234 shipped"


def test_library_log_lines_are_masked_and_http_chatter_is_quiet() -> None:
    script = (
        "import logging; from bot.runtime.logs import configure_logging; configure_logging('debug', 'console'); "
        f"logging.getLogger('httpx').warning('HTTP Request: POST https://api.telegram.org/bot{TG}/sendMessage'); "
        f"logging.getLogger('httpx').info('HTTP Request: POST https://api.telegram.org/bot{TG}/getMe'); "
        f"logging.getLogger('telegram.ext').error('failed with bot{TG}')"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert TG not in result.stderr
    assert "bot<redacted>/sendMessage" in result.stderr
    assert "failed with bot<redacted>" in result.stderr
    assert "getMe" not in result.stderr  # httpx's per-request INFO lines are off even at debug
