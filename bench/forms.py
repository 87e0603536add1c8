"""Return-form benchmark: server time of `GET /f/{token}` and `POST /f/{token}`.

Run:  python bench/forms.py [--n 300]

Each request goes through the whole ASGI app in-process (httpx.ASGITransport, no sockets),
on SQLite in a fresh temporary directory. The form has the seven field types. Next to it,
in the same run and the same way, a bare FastAPI app answers a GET with a fixed HTML page
and a POST by parsing the same form body, so the ratio says what the desk adds: verifying
the signed token, two reads, rendering the autoescaped template, and for POST the typed
validation plus the single transaction that consumes the link, releases the handoff and
writes the resume message. Figures are wall-clock; nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

import httpx  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import HTMLResponse  # noqa: E402

from bot.config import Config  # noqa: E402
from bot.desk import Desk  # noqa: E402
from bot.runtime.logs import configure_logging  # noqa: E402
from bot.web.app import create_app  # noqa: E402

FIELDS = [
    {"name": "order_status", "type": "enum", "enum_values": ["shipped", "delayed", "lost"], "required": True},
    {"name": "tracking_url", "type": "url"},
    {"name": "eta_date", "type": "date", "required": True},
    {"name": "parcels", "type": "number"},
    {"name": "refunded", "type": "boolean"},
    {"name": "carrier", "type": "string"},
    {"name": "notes", "type": "multiline"},
]
ANSWERS = {
    "f_order_status": "shipped", "f_tracking_url": "https://carrier.example/t/1", "f_eta_date": "2026-06-10",
    "f_parcels": "2", "f_refunded": "yes", "f_carrier": "DHL", "f_notes": "Left the depot.", "outcome": "resolved",
}
PAGE = "<!doctype html><html><body><form method=post>" + "<input name=x>" * 7 + "</form></body></html>"


def bare_app() -> FastAPI:
    app = FastAPI()

    @app.get("/f/{token}")
    async def show(token: str) -> HTMLResponse:
        return HTMLResponse(PAGE)

    @app.post("/f/{token}")
    async def submit(token: str, request: Request) -> HTMLResponse:
        form = await request.form()
        return HTMLResponse(f"<p>thanks {len(form)}</p>")

    return app


def ms(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def timed(call) -> float:  # noqa: ANN001
    started = time.perf_counter()
    response = await call()
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text[:300]
    return elapsed


async def main(n: int) -> None:
    configure_logging(level="warning", fmt="console")
    folder = Path(tempfile.mkdtemp(prefix="handoff-bench-forms-"))
    config = Config.from_mapping({
        "database_url": f"sqlite:///{folder / 'bench.db'}", "secret_key": "bench-secret-key-0123456789",
        "server": {"public_url": "http://bench.test"},
        "channels": [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}],
    })
    desk = Desk(config, run_timers=False)
    await desk.start()
    ours = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(desk, manage_desk=False)), base_url="http://bench.test")
    bare = httpx.AsyncClient(transport=httpx.ASGITransport(app=bare_app()), base_url="http://bench.test")

    paths = []
    for i in range(n):
        cid = await desk.conversations.start(name=f"S{i}")
        result = await desk.router.call_tool(cid, "handoff_request", {
            "channel_id": 1, "summary": f"Subscriber {i} needs a person to check an order.",
            "expected_action": "Check the order and fill the form.", "expected_return": FIELDS,
        })
        handoff = await desk.handoffs.get(result["handoff_session_id"])
        paths.append(desk.forms.url(handoff.form_link_id).removeprefix("http://bench.test"))  # type: ignore[union-attr]
    await desk.outbox.stop()  # keep the worker's passes out of the timings

    for client in (ours, bare):  # warm up
        await client.get(paths[0])

    rows = []
    get_ours = [await timed(lambda p=p: ours.get(p)) for p in paths]
    get_bare = [await timed(lambda p=p: bare.get(p)) for p in paths]
    headers = {"Sec-Fetch-Site": "same-origin"}
    post_ours = [await timed(lambda p=p: ours.post(p, data={**ANSWERS, "token": p.rsplit("/", 1)[1]}, headers=headers))
                 for p in paths]
    post_bare = [await timed(lambda p=p: bare.post(p, data={**ANSWERS, "token": p.rsplit("/", 1)[1]}, headers=headers))
                 for p in paths]
    rows.append(("GET /f/{token} (form page)", get_ours, get_bare))
    rows.append(("POST /f/{token} (validate, consume, release)", post_ours, post_bare))

    print(f"Return-form benchmark, n={n} per row | Python {sys.version.split()[0]} | SQLite file in {folder}")
    print(f"{'request':<46}{'p50 ms':>9}{'p99 ms':>9}{'bare p50':>10}{'bare p99':>10}{'ratio p50':>11}")
    for name, mine, theirs in rows:
        print(f"{name:<46}{ms(mine, .5):>9.2f}{ms(mine, .99):>9.2f}{ms(theirs, .5):>10.2f}{ms(theirs, .99):>10.2f}"
              f"{statistics.median(mine) / statistics.median(theirs):>10.1f}x")
    print("bare = a FastAPI app returning a fixed page / parsing the same form body, same transport, same run")

    await ours.aclose()
    await bare.aclose()
    await desk.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="requests per row (default 300)")
    asyncio.run(main(parser.parse_args().n))
