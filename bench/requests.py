"""Per-request server CPU of the hot routes, through a real `handoff serve` process.

Run:  python bench/requests.py [--n 1000] [--cycles 200] [--repo DIR] [--log-level warning]
                               [--cprofile FILE [--lines 40]]

Where `bench/roundtrip.py` times a whole handoff, this isolates what one HTTP request costs the
server, so the web layer's share (routing, dependencies, middleware, encoding) can be seen
apart from the work a route does. The server is a child process (the same command owners run,
with uvicorn's httptools and uvloop); the client is one stdlib keep-alive connection in this
process. Server CPU is read from /proc (every thread's schedstat, in nanoseconds) before and
after each request, so a route that can run once per handoff is measured as precisely as one
that repeats.

Two kinds of route:

- repeatable (`GET /healthz`, `GET /api/handoffs/{id}`, `GET .../messages?after=0`,
  `GET /f/{token}`, `POST /api/conversations`): `--n` requests each, after 50 unmeasured ones;
- once per handoff: `--cycles` times create → `handoff_request` → form GET → form POST →
  the long-poll that sees `[Bot resumed — …]`, each request timed on its own. The work a
  route starts after its answer (the agent's turn after a form POST) lands on the next
  request measured, as it would in a real round trip.

`--repo DIR` serves the code of another checkout (its `bot/` first on PYTHONPATH), to compare
before and after on one machine; run the two one after the other, several times, and compare
medians, because a shared machine is noisy. `--cprofile FILE` serves under cProfile
(`bench/roundtrip.py serve-profiled`) and prints the top by own and by cumulative time.
Nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
import roundtrip as rt  # noqa: E402 - the sibling benchmark, found through the line above

T = TypeVar("T")
FORM_HEADERS = {"content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin"}


def start_server(folder: Path, repo: Path | None, cprofile: Path | None, log_level: str) -> rt.Server:
    """`handoff serve` on a fresh SQLite file, from this checkout or from `repo`."""
    command = [sys.executable, "-c", "from bot.cli import main; main()"] if repo else None
    if cprofile:
        command = [sys.executable, str(Path(rt.__file__).resolve()), "serve-profiled", str(cprofile)]
    env = {"PYTHONPATH": str(repo.resolve())} if repo else None
    return rt.start_desk("requests", folder, f"sqlite:///{folder / 'requests.db'}", log_level=log_level,
                         command=command, env=env)


@dataclass(frozen=True)
class Sample:
    cpu_ns: int  # the server's, every thread
    wall_s: float


class Probe:
    """Times one request at a time: the server's CPU and the wall time around it."""

    def __init__(self, server: rt.Server) -> None:
        self.server = server

    def __call__(self, fn: Callable[[], T]) -> tuple[T, Sample]:
        cpu0, t0 = self.server.thread_cpu_ns(), time.perf_counter()
        result = fn()
        return result, Sample(self.server.thread_cpu_ns() - cpu0, time.perf_counter() - t0)


def report(label: str, samples: list[Sample]) -> None:
    cpus = [s.cpu_ns / 1e6 for s in samples]
    walls = [s.wall_s * 1000 for s in samples]
    print(f"{label:40s} {statistics.fmean(cpus):6.3f} ms CPU/req  {statistics.fmean(walls):6.3f} ms wall"
          f"  (median {statistics.median(cpus):.3f} ms CPU, {len(samples)} requests)", flush=True)


def create(http: rt.Http) -> str:
    return str(http.json("POST", "/api/conversations", {"subscriber": {"name": "Ana"}})["conversation_id"])


def request_handoff(http: rt.Http, cid: str) -> str:
    return str(http.json("POST", f"/api/conversations/{cid}/tools/handoff_request", rt.REQUEST)["handoff_session_id"])


def form_path(http: rt.Http, hid: str) -> str:
    return urllib.parse.urlsplit(http.json("GET", f"/api/handoffs/{hid}")["form_url"]).path


def wait_resumed(http: rt.Http, cid: str) -> None:
    after = 0
    while True:
        messages = http.json("GET", f"/api/conversations/{cid}/messages?after={after}&wait=25")["messages"]
        if rt.resumed(messages):
            return
        after = max([after, *(m["id"] for m in messages)])


def repeatable(probe: Probe, http: rt.Http, n: int) -> None:
    cid = create(http)
    hid = request_handoff(http, cid)
    form = form_path(http, hid)
    routes: list[tuple[str, Callable[[], object], int]] = [
        ("GET /healthz", lambda: http.call("GET", "/healthz"), n),
        ("GET /api/handoffs/{id}", lambda: http.json("GET", f"/api/handoffs/{hid}"), n),
        ("GET messages after=0", lambda: http.json("GET", f"/api/conversations/{cid}/messages?after=0"), n),
        ("GET /f/{token}", lambda: http.call("GET", form), n),
        ("POST /api/conversations", lambda: create(http), n // 2),
    ]
    for label, fn, count in routes:
        for _ in range(50):
            fn()
        report(label, [probe(fn)[1] for _ in range(count)])


def one_handoff(probe: Probe, http: rt.Http, steps: dict[str, list[Sample]]) -> None:
    """create → handoff_request → form GET → form POST → the long-poll that sees the resume."""
    cid, sample = probe(lambda: create(http))
    steps["POST /api/conversations (cycle)"].append(sample)
    hid, sample = probe(lambda: request_handoff(http, cid))
    steps["POST tools/handoff_request"].append(sample)
    form = form_path(http, hid)
    steps["GET /f/{token} (cycle)"].append(probe(lambda: http.call("GET", form))[1])
    body = urllib.parse.urlencode({**rt.ANSWERS, "token": form.rsplit("/", 1)[1]}).encode()
    steps["POST /f/{token}"].append(probe(lambda: http.call("POST", form, body, FORM_HEADERS))[1])
    steps["GET messages wait=25 (resumed)"].append(probe(lambda: wait_resumed(http, cid))[1])


def once_per_handoff(probe: Probe, http: rt.Http, cycles: int) -> None:
    steps: dict[str, list[Sample]] = collections.defaultdict(list)
    for _ in range(cycles):
        one_handoff(probe, http, steps)
    for label, samples in steps.items():
        report(label, samples)


def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="handoff-bench-requests-"))
    source = args.repo or rt.ROOT
    print(f"per-request server CPU, serving {source}{' under cProfile' if args.cprofile else ''}; files in {folder}", flush=True)
    server = start_server(folder, args.repo, args.cprofile, args.log_level)
    http = rt.Http(server.port)
    try:
        if args.n:
            repeatable(Probe(server), http, args.n)
        if args.cycles:
            once_per_handoff(Probe(server), http, args.cycles)
    finally:
        http.close()
        server.stop()
    if args.cprofile:
        rt.print_cprofile(args.cprofile, args.lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="requests per repeatable route (default 1000; 0 skips them)")
    parser.add_argument("--cycles", type=int, default=200, help="handoffs for the once-per-handoff routes (default 200; 0 skips)")
    parser.add_argument("--repo", type=Path, help="serve the code of this checkout instead of this one")
    parser.add_argument("--cprofile", type=Path, metavar="FILE", help="serve under cProfile, write the stats to FILE")
    parser.add_argument("--log-level", default="warning", help="the server's logging.level (default warning; at info uvicorn logs each request)")
    parser.add_argument("--lines", type=int, default=40, help="lines of each profile top (default 40)")
    main(parser.parse_args())
