"""Per-request server CPU of the hot routes, through a real `handoff serve` process.

Run:  python bench/per_request.py [--n 1000] [--cycles 200] [--repo DIR] [--against DIR] [--batch 50]
                               [--api-key KEY] [--log-level warning] [--cprofile FILE [--lines 40]]

Where `bench/roundtrip.py` times a whole handoff, this isolates what one HTTP request costs the
server, so the web layer's share (routing, dependencies, middleware, encoding) can be seen
apart from the work a route does. The server is a child process (the same command owners run,
with uvicorn's httptools and uvloop); the client is one stdlib keep-alive connection in this
process. Server CPU is read from /proc (every thread's schedstat, in nanoseconds) before and
after each request, so a route that can run once per handoff is measured as precisely as one
that repeats.

Two kinds of route:

- repeatable (`GET /healthz`, `GET /api/handoffs/{id}`, `GET .../messages?after=0`,
  `GET /f/{token}`, `POST /api/conversations` without and with an `Idempotency-Key`): `--n`
  requests each, after 50 unmeasured ones;
- once per handoff: `--cycles` times create → `handoff_request` → form GET → form POST →
  the long-poll that sees `[Bot resumed — …]`, each request timed on its own. The work a
  route starts after its answer (the agent's turn after a form POST) lands on the next
  request measured, as it would in a real round trip.

`--repo DIR` serves the code of another checkout (its `bot/` first on PYTHONPATH).
`--against DIR` serves this checkout (or `--repo`) and DIR side by side and alternates between
them in batches of `--batch` requests (one handoff at a time for the cycles), so a shared,
noisy machine slows both alike; it prints both medians and their ratio. `--api-key KEY` serves
with `api.key: KEY` and sends it on every request, so the API's caller check is measured as
agents meet it. `--cprofile FILE`
serves under cProfile (`bench/roundtrip.py serve-profiled`) and prints the top by own and by
cumulative time. Nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
import roundtrip as rt  # noqa: E402 - the sibling benchmark, found through the line above

T = TypeVar("T")
FORM_HEADERS = {"content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin"}
CYCLE_STEPS = ("POST /api/conversations (cycle)", "POST tools/handoff_request", "GET /f/{token} (cycle)",
               "POST /f/{token}", "GET messages wait=25 (resumed)")


def start_server(name: str, folder: Path, repo: Path | None, cprofile: Path | None, log_level: str,
                 api_key: str | None = None) -> rt.Server:
    """`handoff serve` on a fresh SQLite file, from this checkout or from `repo`."""
    command = [sys.executable, "-c", "from bot.cli import main; main()"] if repo else None
    if cprofile:  # that checkout's own roundtrip.py, which puts its checkout first on sys.path
        command = [sys.executable, str((repo or rt.ROOT).resolve() / "bench" / "roundtrip.py"), "serve-profiled", str(cprofile)]
    env = {"PYTHONPATH": str(repo.resolve())} if repo else None
    return rt.start_desk(name, folder, f"sqlite:///{folder / f'{name}.db'}", log_level=log_level, command=command, env=env,
                         extra={"api": {"key": api_key}} if api_key else None)


@dataclass(frozen=True)
class Sample:
    cpu_ns: int  # the server's, every thread
    wall_s: float


@dataclass
class Target:
    """One served checkout, its connection, and the samples taken from it by route."""

    source: Path
    server: rt.Server
    http: rt.Http
    samples: dict[str, list[Sample]] = field(default_factory=lambda: collections.defaultdict(list))

    def timed(self, label: str, fn: Callable[[], T]) -> T:
        """Run one request, recording the server's CPU and the wall time around it under `label`."""
        cpu0, t0 = self.server.thread_cpu_ns(), time.perf_counter()
        result = fn()
        self.samples[label].append(Sample(self.server.thread_cpu_ns() - cpu0, time.perf_counter() - t0))
        return result


def create(http: rt.Http, *, keyed: bool = False) -> str:
    """A new conversation; `keyed`: sent with a fresh Idempotency-Key, as DeskClient does."""
    headers = {"Idempotency-Key": str(uuid.uuid4())} if keyed else None
    return str(http.json("POST", "/api/conversations", {"subscriber": {"name": "Ana"}}, headers)["conversation_id"])


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


def repeatable_routes(http: rt.Http) -> list[tuple[str, Callable[[], object]]]:
    """The repeatable routes, on a conversation with an active handoff made for them."""
    cid = create(http)
    hid = request_handoff(http, cid)
    form = form_path(http, hid)
    return [
        ("GET /healthz", lambda: http.call("GET", "/healthz")),
        ("GET /api/handoffs/{id}", lambda: http.json("GET", f"/api/handoffs/{hid}")),
        ("GET messages after=0", lambda: http.json("GET", f"/api/conversations/{cid}/messages?after=0")),
        ("GET /f/{token}", lambda: http.call("GET", form)),
        ("POST /api/conversations", lambda: create(http)),
        ("POST /api/conversations (Idempotency-Key)", lambda: create(http, keyed=True)),
    ]


def repeatable(targets: list[Target], n: int, batch: int) -> None:
    """Each route `n` times on every target, alternating targets every `batch` requests."""
    routes = [repeatable_routes(t.http) for t in targets]
    for index in range(len(routes[0])):
        for target_routes in routes:
            for _ in range(50):
                target_routes[index][1]()
        for _ in range(0, n, batch):
            for target, target_routes in zip(targets, routes, strict=True):
                label, fn = target_routes[index]
                for _ in range(batch):
                    target.timed(label, fn)


def one_handoff(target: Target) -> None:
    """create → handoff_request → form GET → form POST → the long-poll that sees the resume."""
    http = target.http
    cid = target.timed(CYCLE_STEPS[0], lambda: create(http))
    hid = target.timed(CYCLE_STEPS[1], lambda: request_handoff(http, cid))
    form = form_path(http, hid)
    target.timed(CYCLE_STEPS[2], lambda: http.call("GET", form))
    body = urllib.parse.urlencode({**rt.ANSWERS, "token": form.rsplit("/", 1)[1]}).encode()
    target.timed(CYCLE_STEPS[3], lambda: http.call("POST", form, body, FORM_HEADERS))
    target.timed(CYCLE_STEPS[4], lambda: wait_resumed(http, cid))


def median_ms(samples: list[Sample]) -> float:
    return statistics.median(s.cpu_ns for s in samples) / 1e6


def report(targets: list[Target]) -> None:
    if len(targets) == 1:
        for label, samples in targets[0].samples.items():
            cpus = [s.cpu_ns / 1e6 for s in samples]
            walls = [s.wall_s * 1000 for s in samples]
            print(f"{label:40s} {statistics.fmean(cpus):6.3f} ms CPU/req  {statistics.fmean(walls):6.3f} ms wall"
                  f"  (median {statistics.median(cpus):.3f} ms CPU, {len(samples)} requests)")
        return
    first, second = targets
    print(f"\nmedian server CPU per request: A = {first.source}, B = {second.source}")
    for label, samples in first.samples.items():
        a, b = median_ms(samples), median_ms(second.samples[label])
        print(f"{label:40s} A {a:6.3f} ms  B {b:6.3f} ms  A/B {a / b:5.2f}  ({len(samples)} requests each)")


def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="handoff-bench-requests-"))
    sources = [(args.repo, args.cprofile), *([(args.against, None)] if args.against else [])]
    print(f"per-request server CPU, serving {', '.join(str(repo or rt.ROOT) for repo, _ in sources)}"
          f"{' under cProfile' if args.cprofile else ''}; files in {folder}", flush=True)
    targets: list[Target] = []
    try:
        for k, (repo, cprofile) in enumerate(sources):
            server = start_server(f"requests-{k}", folder, repo, cprofile, args.log_level, args.api_key)
            headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else None
            targets.append(Target(repo or rt.ROOT, server, rt.Http(server.port, headers=headers)))
        if args.n:
            repeatable(targets, args.n, args.batch if args.against else args.n)
        for _ in range(args.cycles):
            for target in targets:
                one_handoff(target)
    finally:
        for target in targets:
            target.http.close()
            target.server.stop()
    report(targets)
    if args.cprofile:
        rt.print_cprofile(args.cprofile, args.lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="requests per repeatable route (default 1000; 0 skips them)")
    parser.add_argument("--cycles", type=int, default=200, help="handoffs for the once-per-handoff routes (default 200; 0 skips)")
    parser.add_argument("--repo", type=Path, help="serve the code of this checkout instead of this one")
    parser.add_argument("--against", type=Path, metavar="DIR", help="also serve this checkout, alternating with the first")
    parser.add_argument("--batch", type=int, default=50, help="with --against: requests per turn of each server (default 50)")
    parser.add_argument("--cprofile", type=Path, metavar="FILE", help="serve under cProfile, write the stats to FILE")
    parser.add_argument("--api-key", help="serve with this api.key and send it on every request")
    parser.add_argument("--log-level", default="warning", help="the server's logging.level (default warning; at info uvicorn logs each request)")
    parser.add_argument("--lines", type=int, default=40, help="lines of each profile top (default 40)")
    main(parser.parse_args())
