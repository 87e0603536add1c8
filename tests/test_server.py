"""The server's garbage-collector settling (bot/web/server.py), in a Python process of its own:
freezing the heap is for the life of a process, so it never runs inside the test process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from bot.web.server import GC_THRESHOLDS

ROOT = Path(__file__).resolve().parent.parent

SERVE_ONCE = textwrap.dedent("""
    import asyncio, gc, json, sys
    import uvicorn
    from bot.web.server import DeskServer

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def main():
        before = gc.get_threshold()
        server = DeskServer(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning"),
                            before_shutdown=lambda: None, settle_heap=sys.argv[1] == "settle")
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        print(json.dumps({"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold(), "before": before}))
        server.should_exit = True
        await task

    asyncio.run(main())
""")


def serve_once(mode: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", SERVE_ONCE, mode], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_settled_server_freezes_the_start_up_heap_and_spaces_collections_out() -> None:
    seen = serve_once("settle")
    assert seen["frozen"] > 10_000  # the imported modules and the app, at the least
    assert tuple(seen["threshold"]) == GC_THRESHOLDS
    assert tuple(seen["before"]) != GC_THRESHOLDS


def test_a_server_left_unsettled_leaves_the_collector_as_it_was() -> None:
    seen = serve_once("leave")
    assert seen["frozen"] == 0
    assert seen["threshold"] == seen["before"]
