"""Round-trip benchmark: a handoff to the owner inbox and back, through real `handoff serve`
processes over real HTTP on loopback, next to awaithumans doing the same shape.

Run:  python bench/roundtrip.py [--sequential 150] [--concurrent 300] [--clients 20] [--parked 200]
                                [--no-postgres] [--no-sqlite-pair] [--no-awaithumans] [--awaithumans-python PATH]
                                [--count-sql [--count-n 100]] [--profile DIR] [--cprofile FILE]
                                [--profile-on {sqlite,postgres}]

One round trip is what an agent and a person do for one handoff:

1. `POST /api/conversations` (create);
2. `POST /api/conversations/{cid}/tools/handoff_request` to the owner inbox channel with three
   typed return fields (enum, date, number) (request);
3. `GET /api/handoffs/{sid}` for the return-form link the inbox shows (link);
4. `GET /f/{token}` (form GET) and `POST /f/{token}` with the three values (form POST);
5. `GET /api/conversations/{cid}/messages?after=…&wait=25` until the agent sees the
   `[Bot resumed — …]` message with the typed values (resumed).

The servers are child processes (`handoff serve`, the same command owners run), measured
alone: the clients are threads of this process using stdlib http.client, one keep-alive
connection each. Server CPU comes from /proc/<pid>/stat (user + system, every thread), per
step from the threads' /proc/<pid>/task/*/schedstat (nanoseconds), and peak RSS from VmHWM.

Passes, on SQLite (one instance) and on PostgreSQL (two instances on one throwaway cluster
from scripts/pg-throwaway.sh; skipped with a line saying why when there is no initdb):

- sequential: one client, one round trip after the other; the CPU of each step;
- concurrent: `--clients` clients at once (on PostgreSQL each sticks to one instance,
  alternating, as a load balancer with sticky sessions would);
- parked (SQLite only): the agent's long-poll is already waiting when the form is
  submitted; the push lag is from the form POST's answer to the long-poll's answer;
- SQLite, 2 instances on one file (`--no-sqlite-pair` skips it): the concurrent pass with a
  second `handoff serve` on the same database file, clients alternating between the two,
  to show what a second core gives when each round trip's CPU is the limit.

awaithumans 0.1.12 (`awaithumans[server]`) runs the same shape in the same run, in a venv of
its own under a temporary directory, when pip can install it: create task → GET task →
complete → poll (its long-poll checks once a second). Otherwise the script says so.

`--count-sql` adds a sequential pass against a server whose SQLAlchemy engines count their
statements, transactions, aiosqlite calls and new connections, and whose garbage collections
are timed (listeners installed by this file in the served process, `serve-counted` below).
`--profile DIR` runs the concurrent SQLite pass under py-spy (`--gil`: samples of the thread
holding the GIL, so waits are left out) and prints the top of the profile by own and by
cumulative samples for the whole process and for the `handoff_request`, form POST and
long-poll routes; `--cprofile FILE` does the same pass under cProfile (`serve-profiled`).
`--profile-on postgres` profiles the first PostgreSQL instance instead, through both of its
passes (the sequential one, which it serves alone, and the concurrent one), and runs the
SQLite passes unprofiled.
Figures are wall-clock on whatever machine runs this; nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import base64
import collections
import http.client
import json
import mmap
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-key-0123456789abcdef"
FIELDS = [
    {"name": "order_status", "type": "enum", "enum_values": ["shipped", "delayed", "lost"], "required": True},
    {"name": "eta_date", "type": "date", "required": True},
    {"name": "parcels", "type": "number"},
]
ANSWERS = {"f_order_status": "shipped", "f_eta_date": "2026-06-10", "f_parcels": "2", "outcome": "resolved",
           "note": "Carrier confirmed."}
EXPECTED = ("order_status: shipped", "eta_date: 2026-06-10", "parcels: 2")
REQUEST = {"channel_id": 1, "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
           "expected_action": "Look up order #1234, fill in the form.", "expected_return": FIELDS}
DESK_PHASES = ("create", "request", "link", "form GET", "form POST", "resumed")
AH_PHASES = ("create", "get", "complete", "poll")
TICKS = os.sysconf("SC_CLK_TCK")
COUNTERS = ("statements", "select", "insert", "update", "delete", "write tx", "read tx", "rollback", "aiosqlite", "connects")
GC_COUNTERS = ("gc passes", "gc full passes", "gc us", "gc max us")
SLOTS = COUNTERS + GC_COUNTERS


# --------------------------------------------------------------------------- HTTP


class Http:
    """One keep-alive connection to one server; every answer must be 2xx."""

    def __init__(self, port: int, timeout: float = 40.0, headers: dict[str, str] | None = None) -> None:
        self.port, self.timeout, self.headers = port, timeout, headers or {}  # `headers`: sent with every request
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
        try:
            self.conn.request(method, path, body=body, headers={**self.headers, **(headers or {})})
            response = self.conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            raise
        if not 200 <= response.status < 300:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
        return data

    def json(self, method: str, path: str, payload: Any = None, headers: dict[str, str] | None = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        return json.loads(self.call(method, path, body, {"content-type": "application/json", **(headers or {})}))

    def close(self) -> None:
        self.conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_up(port: int, path: str, proc: subprocess.Popen[bytes], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with {proc.returncode} before it listened")
        try:
            Http(port, timeout=2).call("GET", path)
            return
        except (OSError, RuntimeError, http.client.HTTPException):
            time.sleep(0.1)
    raise RuntimeError(f"the server on port {port} did not answer {path} within {seconds:.0f} s")


# --------------------------------------------------------------------------- servers


@dataclass
class Server:
    """A served child process and what /proc says about it."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    pid: int

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime: every thread, live or ended

    def thread_cpu_ns(self) -> int:
        total = 0
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass  # a thread that ended between listing and reading
        return total

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()


def child_pid(parent: int, seconds: float = 20.0) -> int:
    """The pid of `parent`'s first child (the server that py-spy started)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{parent}/task").iterdir():
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.05)
    raise RuntimeError(f"process {parent} started no child")


def handoff_command() -> list[str]:
    script = Path(sys.executable).parent / "handoff"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from bot.cli import main; main()"]


def start_desk(name: str, folder: Path, database_url: str, *, log_level: str, wrap: list[str] | None = None,
               command: list[str] | None = None, env: dict[str, str] | None = None,
               extra: dict[str, Any] | None = None) -> Server:
    port = free_port()
    config = folder / f"{name}.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "database_url": database_url, "secret_key": SECRET,
        "server": {"host": "127.0.0.1", "port": port, "public_url": f"http://127.0.0.1:{port}"},
        "logging": {"level": log_level},
        "channels": [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}], **(extra or {}),
    }))
    argv = [*(wrap or []), *(command or handoff_command()), "serve", "-c", str(config)]
    proc = subprocess.Popen(argv, cwd=folder, stdout=subprocess.DEVNULL, stderr=open(folder / f"{name}.log", "wb"),
                            env={**os.environ, **(env or {})})
    pid = child_pid(proc.pid) if wrap else proc.pid
    server = Server(name, port, proc, pid)
    try:
        wait_until_up(port, "/healthz", proc)
    except RuntimeError:
        server.stop()
        print((folder / f"{name}.log").read_text()[-2000:], file=sys.stderr)
        raise
    return server


@dataclass
class Cluster:
    """A throwaway PostgreSQL cluster: its URL, and the CPU its processes used."""

    url: str
    folder: Path

    def cpu_seconds(self) -> float:
        """The postmaster's and its children's user + system time, ended children included."""
        postmaster = int((self.folder / "data" / "postmaster.pid").read_text().split()[0])
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            pid = int(stat.parent.name)
            if pid == postmaster:
                total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
            elif int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
        return total / TICKS


@contextmanager
def postgres() -> Iterator[Cluster | None]:
    """A throwaway PostgreSQL cluster, or None (with the reason printed) without one."""
    script = ROOT / "scripts" / "pg-throwaway.sh"
    started = subprocess.run([str(script), "start"], capture_output=True, text=True)
    if started.returncode != 0:
        print(f"PostgreSQL: skipped ({started.stderr.strip() or 'pg-throwaway.sh failed'})")
        yield None
        return
    exports = dict(line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines() if "=" in line)
    try:
        yield Cluster(exports["HANDOFF_TEST_POSTGRES_URL"], Path(exports["PG_THROWAWAY_DIR"]))
    finally:
        subprocess.run([str(script), "stop", exports["PG_THROWAWAY_DIR"]], capture_output=True)


# --------------------------------------------------------------------------- the round trips


@dataclass
class Tally:
    """Per-step latencies and server CPU of one pass, and its errors."""

    phases: tuple[str, ...]
    latency: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    cpu_ns: dict[str, list[int]] = field(default_factory=lambda: collections.defaultdict(list))
    counts: dict[str, list[list[int]]] = field(default_factory=lambda: collections.defaultdict(list))
    lag: list[float] = field(default_factory=list)
    early: int = 0  # parked polls that answered before the POST's own answer arrived
    done: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Steps:
    """Times each step of one round trip; with a probe, also the server's CPU per step."""

    def __init__(self, tally: Tally, cpu: Callable[[], int] | None = None, counters: Callable[[], list[int]] | None = None) -> None:
        self.tally, self.cpu, self.counters = tally, cpu, counters
        self.times: dict[str, float] = {}
        self.cpus: dict[str, int] = {}
        self.counts: dict[str, list[int]] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        cpu0 = self.cpu() if self.cpu else 0
        counts0 = self.counters() if self.counters else []
        t0 = time.perf_counter()
        yield
        self.times[name] = time.perf_counter() - t0
        if self.cpu:
            self.cpus[name] = self.cpu() - cpu0
        if self.counters:
            self.counts[name] = [b - a for a, b in zip(counts0, self.counters(), strict=True)]

    def record(self) -> None:
        with self.tally.lock:
            for name, seconds in self.times.items():
                self.tally.latency[name].append(seconds)
            for name, ns in self.cpus.items():
                self.tally.cpu_ns[name].append(ns)
            for name, counts in self.counts.items():
                self.tally.counts[name].append(counts)
            self.tally.done += 1


def resumed(messages: list[dict[str, Any]]) -> bool:
    return any(m["role"] == "system" and m["text"].startswith("[Bot resumed") and all(e in m["text"] for e in EXPECTED)
               for m in messages)


def desk_round_trip(http: Http, steps: Steps, poller: Http | None = None) -> None:
    """One handoff and back. With `poller`, the agent's long-poll is parked on that second
    connection before the form is submitted, and the push lag is recorded."""
    with steps.step("create"):
        cid = http.json("POST", "/api/conversations", {"subscriber": {"name": "Ana"}})["conversation_id"]
    with steps.step("request"):
        result = http.json("POST", f"/api/conversations/{cid}/tools/handoff_request", REQUEST)
    if not result.get("ok") or not result.get("human_notified"):
        raise RuntimeError(f"handoff_request: {result}")
    with steps.step("link"):
        form_path = urllib.parse.urlsplit(http.json("GET", f"/api/handoffs/{result['handoff_session_id']}")["form_url"]).path
    with steps.step("form GET"):
        http.call("GET", form_path)
    body = urllib.parse.urlencode({**ANSWERS, "token": form_path.rsplit("/", 1)[1]}).encode()
    headers = {"content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin"}
    if poller is None:
        with steps.step("form POST"):
            http.call("POST", form_path, body, headers)
        with steps.step("resumed"):
            after = 0
            while True:
                messages = http.json("GET", f"/api/conversations/{cid}/messages?after={after}&wait=25")["messages"]
                if resumed(messages):
                    break
                after = max([after, *(m["id"] for m in messages)])
        return
    after = max(m["id"] for m in http.json("GET", f"/api/conversations/{cid}/messages?after=0")["messages"])
    answered: list[float] = []
    failure: list[BaseException] = []

    def park() -> None:
        try:
            cursor = after
            while True:
                messages = poller.json("GET", f"/api/conversations/{cid}/messages?after={cursor}&wait=25")["messages"]
                if resumed(messages):
                    answered.append(time.perf_counter())
                    return
                cursor = max([cursor, *(m["id"] for m in messages)])
        except BaseException as exc:  # noqa: BLE001 - reported by the round trip
            failure.append(exc)

    parked = threading.Thread(target=park)
    parked.start()
    time.sleep(0.02)  # let the poll reach the server and park (a benchmark, not a test)
    with steps.step("form POST"):
        http.call("POST", form_path, body, headers)
    posted = time.perf_counter()
    parked.join()
    if failure:
        raise failure[0]
    with steps.tally.lock:
        steps.tally.lag.append(answered[0] - posted)
        steps.tally.early += answered[0] < posted


def ah_round_trip(http: Http, steps: Steps, token: str, n: int, parked: bool = False) -> None:
    auth = {"authorization": f"Bearer {token}"}
    with steps.step("create"):
        task = http.json("POST", "/api/tasks", {
            "task": REQUEST["summary"], "payload": {"order": "1234"}, "payload_schema": {"type": "object"},
            "response_schema": {"type": "object", "properties": {
                "order_status": {"type": "string", "enum": ["shipped", "delayed", "lost"]},
                "eta_date": {"type": "string", "format": "date"}, "parcels": {"type": "number"}},
                "required": ["order_status", "eta_date"]},
            "timeout_seconds": 3600, "idempotency_key": f"bench-{n}-{time.monotonic_ns()}-{threading.get_ident()}",
        }, auth)
    tid = task["id"]
    with steps.step("get"):
        http.json("GET", f"/api/tasks/{tid}", headers=auth)
    answer = {"response": {"order_status": "shipped", "eta_date": "2026-06-10", "parcels": 2}}
    if not parked:
        with steps.step("complete"):
            http.json("POST", f"/api/tasks/{tid}/complete", answer, auth)
        with steps.step("poll"):
            polled = http.json("GET", f"/api/tasks/{tid}/poll?timeout=25", headers=auth)
        if polled["status"] != "completed":
            raise RuntimeError(f"poll: {polled}")
        return
    poller = Http(http.port)
    answered: list[float] = []
    thread = threading.Thread(target=lambda: (poller.json("GET", f"/api/tasks/{tid}/poll?timeout=25", headers=auth),
                                              answered.append(time.perf_counter())))
    thread.start()
    time.sleep(0.02)
    with steps.step("complete"):
        http.json("POST", f"/api/tasks/{tid}/complete", answer, auth)
    posted = time.perf_counter()
    thread.join()
    poller.close()
    with steps.tally.lock:
        steps.tally.lag.append(answered[0] - posted)


@dataclass
class Pass:
    name: str
    tally: Tally
    wall: float
    cpu: float  # server seconds, all instances
    rss_mib: float
    database_cpu: float | None = None  # PostgreSQL's own seconds


def run_pass(name: str, servers: list[Server], phases: tuple[str, ...], count: int, clients: int,
             trip: Callable[[Http, Steps, int], None], *, per_step_cpu: bool = False,
             counters: Callable[[], list[int]] | None = None, deadline_s: float = 120.0,
             cluster: Cluster | None = None) -> Pass:
    """`count` round trips by `clients` threads; client k talks to servers[k % len(servers)]."""
    tally = Tally(phases)
    issued = iter(range(count))
    issue_lock = threading.Lock()
    stop_at = time.monotonic() + deadline_s

    def client(k: int) -> None:
        server = servers[k % len(servers)]
        http = Http(server.port)
        while time.monotonic() < stop_at:
            with issue_lock:
                n = next(issued, None)
            if n is None:
                break
            steps = Steps(tally, server.thread_cpu_ns if per_step_cpu else None, counters)
            try:
                trip(http, steps, n)
                steps.record()
            except Exception as exc:  # noqa: BLE001 - counted and shown, the pass goes on
                with tally.lock:
                    tally.errors.append(f"{type(exc).__name__}: {exc}"[:200])
        http.close()

    cpu0 = sum(s.cpu_seconds() for s in servers)
    db0 = cluster.cpu_seconds() if cluster else 0.0
    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    cpu = sum(s.cpu_seconds() for s in servers) - cpu0
    database = cluster.cpu_seconds() - db0 if cluster else None
    return Pass(name, tally, wall, cpu, max(s.peak_rss_mib() for s in servers), database)


# --------------------------------------------------------------------------- counting SQL in the served process


def serve_counted(counter_file: str, argv: list[str]) -> None:
    """`handoff serve` with SQLAlchemy event listeners that count, into a shared file, every
    statement by verb, every transaction begun and rolled back, and every call aiosqlite
    hands to its thread, every new database connection, and a gc callback that times every collection. The bench process
    reads the file between steps."""
    import gc

    import aiosqlite.core
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import Pool

    with open(counter_file, "r+b") as f:
        shared = mmap.mmap(f.fileno(), 8 * len(SLOTS))
    slots = {name: i for i, name in enumerate(SLOTS)}

    def bump(name: str, by: int = 1, keep_max: bool = False) -> None:
        offset = 8 * slots[name]
        old = struct.unpack("q", shared[offset:offset + 8])[0]
        shared[offset:offset + 8] = struct.pack("q", max(old, by) if keep_max else old + by)

    gc_started = [0]

    def _collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter_ns()
            return
        took = (time.perf_counter_ns() - gc_started[0]) // 1000
        bump("gc passes")
        bump("gc full passes", int(info["generation"] == 2))
        bump("gc us", took)
        bump("gc max us", took, keep_max=True)

    gc.callbacks.append(_collection)

    @event.listens_for(Engine, "before_cursor_execute")
    def _statement(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        _count_sql(statement)

    def _count_sql(statement: str) -> None:
        words = statement.split(None, 2)
        verb = words[0].lower()
        if verb == "begin":  # bot/store/db.py opens every SQLite transaction itself
            bump("write tx" if len(words) > 1 and words[1].upper() == "IMMEDIATE" else "read tx")
            return
        bump("statements")
        if verb in slots:
            bump(verb)

    event.listen(Engine, "rollback", lambda _conn: bump("rollback"))
    event.listen(Pool, "connect", lambda _dbapi, _record: bump("connects"))
    original = aiosqlite.core.Connection._execute

    async def counted(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        bump("aiosqlite")
        return await original(self, fn, *args, **kwargs)

    aiosqlite.core.Connection._execute = counted  # type: ignore[method-assign]

    # What bypasses SQLAlchemy's cursor on SQLite: the BEGINs bot/store/db.py sends and the
    # prepared statements (bot/store/prepared.py), both sqlite3 Connection calls made through
    # the inline driver (SQLAlchemy's own statements are cursor calls, counted above).
    import sqlite3

    from bot.store.sqlite_driver import InlineConnection

    inline = InlineConnection.run_retrying_busy

    async def counted_inline(self: Any, call: Any, *args: Any) -> Any:
        if isinstance(getattr(call, "__self__", None), sqlite3.Connection) and args and isinstance(args[0], str):
            _count_sql(args[0])
        return await inline(self, call, *args)

    InlineConnection.run_retrying_busy = counted_inline  # type: ignore[method-assign]
    from bot.cli import app

    app(argv, prog_name="handoff")


def serve_profiled(stats_file: str, argv: list[str]) -> None:
    """`handoff serve` under cProfile (the event loop's thread), written to `stats_file` when
    the server stops: exact own and cumulative times, beside py-spy's samples."""
    import cProfile

    from bot.cli import app

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        app(argv, prog_name="handoff", standalone_mode=False)
    finally:
        profiler.disable()
        profiler.dump_stats(stats_file)


def print_cprofile(stats_file: Path, lines: int) -> None:
    import pstats

    for key, title in (("tottime", "own"), ("cumulative", "cumulative")):
        print(f"\n-- cProfile of the concurrent pass, by {title} time (event-loop thread):")
        stats = pstats.Stats(str(stats_file))
        stats.sort_stats(key).print_stats(lines)


class Counters:
    """The bench side of the counted server's shared file."""

    def __init__(self, path: Path) -> None:
        path.write_bytes(b"\0" * 8 * len(SLOTS))
        self._file = open(path, "r+b")  # noqa: SIM115 - open for the run
        self._view = mmap.mmap(self._file.fileno(), 8 * len(SLOTS))

    def read(self) -> list[int]:
        return list(struct.unpack(f"{len(SLOTS)}q", self._view[:]))

    def sql(self) -> list[int]:
        return self.read()[:len(COUNTERS)]

    def gc(self) -> list[int]:
        return self.read()[len(COUNTERS):]

    def forget_longest_pause(self) -> None:
        """Start-up's collections are not the request path's."""
        offset = 8 * SLOTS.index("gc max us")
        self._view[offset:offset + 8] = struct.pack("q", 0)


# --------------------------------------------------------------------------- profiles (py-spy raw output)


PROFILED_ROUTES = {"handoff_request (POST /api/conversations/{cid}/tools/{name})": "call_tool (bot/web/api.py",
                   "form POST (POST /f/{token})": "submit_form (forms/routes.py",
                   "long-poll (GET /api/conversations/{cid}/messages)": "list_messages (bot/web/api.py"}


def pyspy_output(folder: str) -> Path:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    return out / "roundtrip-concurrent.txt"


def pyspy_wrap(raw: Path) -> list[str]:
    """The command line that starts a server under py-spy, writing raw samples to `raw`."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return [pyspy, "record", "--nonblocking", "--gil", "--function", "--rate", "200", "--format", "raw", "-o", str(raw), "--"]


def profile_tops(raw: Path, routes: dict[str, str], lines: int) -> None:
    """Print the top frames by own and by cumulative samples: for the whole process, and for
    the samples whose stack runs through each route's function."""
    stacks: list[tuple[list[str], int]] = []
    for line in raw.read_text().splitlines():
        frames, _, count = line.rpartition(" ")
        if frames:
            stacks.append((frames.split(";"), int(count)))
    scopes = {"whole process": None, **routes}
    for title, needle in scopes.items():
        chosen = [(f, c) for f, c in stacks if needle is None or any(needle in frame for frame in f)]
        total = sum(c for _, c in chosen)
        if not total:
            print(f"\n-- {title}: no samples")
            continue
        own: collections.Counter[str] = collections.Counter()
        cumulative: collections.Counter[str] = collections.Counter()
        for frames, count in chosen:
            own[frames[-1]] += count
            for frame in set(frames):
                cumulative[frame] += count
        print(f"\n-- {title}: {total} samples")
        for label, counter in (("own", own), ("cumulative", cumulative)):
            print(f"   by {label}:")
            for frame, count in counter.most_common(lines):
                print(f"   {100 * count / total:5.1f}%  {frame[:150]}")


# --------------------------------------------------------------------------- awaithumans


def awaithumans_python(folder: Path, given: str | None) -> Path | None:
    """A venv with awaithumans[server]==0.1.12 (`given`, or a new one under `folder`), or None
    (with the reason printed)."""
    if given:
        return Path(given)
    venv = folder / "awaithumans-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "awaithumans[server]==0.1.12"], capture_output=True, text=True)
    if pip.returncode != 0:
        print(f"awaithumans: not installable here, no reference in this run ({pip.stderr.strip().splitlines()[-1:]})")
        return None
    return venv / "bin" / "python"


def start_awaithumans(python: Path, folder: Path, log_level: str) -> tuple[Server, str]:
    port, token = free_port(), "bench-admin-token-0123456789"
    env = {**os.environ, "AWAITHUMANS_DB_PATH": str(folder / "awaithumans.db"), "AWAITHUMANS_ADMIN_API_TOKEN": token,
           "AWAITHUMANS_PAYLOAD_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
           "AWAITHUMANS_PUBLIC_URL": f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen([str(python), "-m", "awaithumans.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", log_level], cwd=folder, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(folder / "awaithumans.log", "wb"))
    server = Server("awaithumans", port, proc, proc.pid)
    try:
        wait_until_up(port, "/api/health", proc)
    except RuntimeError:
        server.stop()
        print((folder / "awaithumans.log").read_text()[-2000:], file=sys.stderr)
        raise
    return server, token


# --------------------------------------------------------------------------- printing


def pct(values: list[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def print_pass(p: Pass) -> None:
    t = p.tally
    rate = t.done / p.wall if p.wall else 0.0
    cpu_ms = 1000 * p.cpu / t.done if t.done else float("nan")
    print(f"\n{p.name}: {t.done} round trips in {p.wall:.1f} s = {rate:.1f}/s | server CPU {cpu_ms:.1f} ms per round trip "
          f"({100 * p.cpu / p.wall:.0f}% of one core) "
          + (f"+ PostgreSQL {1000 * p.database_cpu / max(t.done, 1):.1f} ms " if p.database_cpu is not None else "")
          + f"| peak RSS {p.rss_mib:.0f} MiB | errors {len(t.errors)}")
    for error in collections.Counter(t.errors).most_common(3):
        print(f"   error x{error[1]}: {error[0]}")
    header = f"   {'step':<10} {'p50 ms':>8} {'p99 ms':>8}"
    if t.cpu_ns:
        header += f" {'CPU ms (mean)':>14}"
    print(header)
    for phase in t.phases:
        samples = t.latency.get(phase)
        if not samples:
            continue
        line = f"   {phase:<10} {1000 * statistics.median(samples):>8.1f} {1000 * pct(samples, 99):>8.1f}"
        if t.cpu_ns:
            line += f" {statistics.mean(t.cpu_ns[phase]) / 1e6:>14.1f}"
        print(line)
    if t.lag:
        print(f"   push lag (submit answered -> parked long-poll answered): p50 {1000 * statistics.median(t.lag):.1f} ms, "
              f"p99 {1000 * pct(t.lag, 99):.1f} ms, max {1000 * max(t.lag):.1f} ms over {len(t.lag)}"
              + (f"; {t.early} answered before the POST's own answer (negative lag)" if t.early else ""))


def print_counts(t: Tally, gc_before: list[int], gc_after: list[int]) -> None:
    print(f"\nSQL per round trip on SQLite (mean of {t.done}): statements other than BEGIN, by verb; transactions by "
          "their BEGIN (write = IMMEDIATE), rollbacks, the calls aiosqlite ran on its thread, new connections")
    print(f"   {'step':<10}" + "".join(f"{c:>11}" for c in COUNTERS))
    totals = [0.0] * len(COUNTERS)
    for phase in t.phases:
        rows = t.counts.get(phase)
        if not rows:
            continue
        means = [statistics.mean(r[i] for r in rows) for i in range(len(COUNTERS))]
        totals = [a + b for a, b in zip(totals, means, strict=True)]
        print(f"   {phase:<10}" + "".join(f"{m:>11.1f}" for m in means))
    print(f"   {'total':<10}" + "".join(f"{m:>11.1f}" for m in totals))
    gc_delta = dict(zip(GC_COUNTERS, (b - a for a, b in zip(gc_before, gc_after, strict=True)), strict=True))
    print(f"   garbage collector over the {t.done} round trips: {gc_delta['gc passes']} passes "
          f"({gc_delta['gc full passes']} full), {gc_delta['gc us'] / 1000:.1f} ms in all, "
          f"longest pause {gc_after[-1] / 1000:.1f} ms")


# --------------------------------------------------------------------------- main


def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="handoff-bench-roundtrip-"))
    print("Handoff Desk round-trip benchmark (handoff serve over loopback HTTP, stdlib clients in another process)")
    print(f"Python {platform.python_version()} | SQLite {sqlite3.sqlite_version} | {os.cpu_count()} CPUs | {platform.platform()}")
    print(f"sequential {args.sequential}, concurrent {args.concurrent} with {args.clients} clients, parked {args.parked}; "
          f"server log level {args.log_level}; files in {folder}", flush=True)

    def desk_trip(http: Http, steps: Steps, _n: int) -> None:
        desk_round_trip(http, steps)

    def parked_trip(http: Http, steps: Steps, _n: int) -> None:
        poller = Http(http.port)
        try:
            desk_round_trip(http, steps, poller)
        finally:
            poller.close()

    results: dict[str, Pass] = {}
    profiling_sqlite, profiling_postgres = args.profile_on == "sqlite", args.profile_on == "postgres"
    desk = start_desk("sqlite", folder, f"sqlite:///{folder / 'desk.db'}", log_level=args.log_level)
    try:
        run_pass("warm-up", [desk], DESK_PHASES, 10, 1, desk_trip)
        results["seq"] = run_pass("SQLite, 1 instance, sequential", [desk], DESK_PHASES, args.sequential, 1, desk_trip,
                                  per_step_cpu=True)
        print_pass(results["seq"])
        if not (args.profile and profiling_sqlite) and args.concurrent:
            results["conc"] = run_pass(f"SQLite, 1 instance, {args.clients} clients", [desk], DESK_PHASES, args.concurrent,
                                       args.clients, desk_trip)
            print_pass(results["conc"])
        if args.parked:
            results["parked"] = run_pass("SQLite, 1 instance, parked long-poll", [desk], DESK_PHASES, args.parked, 1, parked_trip)
            print_pass(results["parked"])
        if args.sqlite_pair and not (args.profile and profiling_sqlite) and args.concurrent:
            # A second server on the same file: what the second core does for SQLite. Writers
            # of two processes meet at SQLite's lock (BEGIN IMMEDIATE, retried inline).
            twin = start_desk("sqlite-b", folder, f"sqlite:///{folder / 'desk.db'}", log_level=args.log_level)
            try:
                run_pass("warm-up", [twin], DESK_PHASES, 10, 1, desk_trip)
                results["pair"] = run_pass(f"SQLite, 2 instances on one file, {args.clients} clients", [desk, twin],
                                           DESK_PHASES, args.concurrent, args.clients, desk_trip)
                print_pass(results["pair"])
            finally:
                twin.stop()
    finally:
        desk.stop()

    if args.profile and profiling_sqlite:
        raw = pyspy_output(args.profile)
        profiled = start_desk("sqlite-profiled", folder, f"sqlite:///{folder / 'desk-profiled.db'}", log_level=args.log_level,
                              wrap=pyspy_wrap(raw))
        try:
            run_pass("warm-up", [profiled], DESK_PHASES, 10, 1, desk_trip)
            results["conc"] = run_pass(f"SQLite, 1 instance, {args.clients} clients (under py-spy)", [profiled], DESK_PHASES,
                                       args.concurrent, args.clients, desk_trip)
            print_pass(results["conc"])
        finally:
            profiled.stop()
            profiled.proc.wait(timeout=60)
        print(f"\nprofile of the concurrent pass ({raw}):")
        profile_tops(raw, PROFILED_ROUTES, args.lines)

    if args.cprofile and profiling_sqlite:
        stats_file = Path(args.cprofile)
        stats_file.parent.mkdir(parents=True, exist_ok=True)
        profiled = start_desk("sqlite-cprofile", folder, f"sqlite:///{folder / 'desk-cprofile.db'}", log_level=args.log_level,
                              command=[sys.executable, str(Path(__file__).resolve()), "serve-profiled", str(stats_file)])
        try:
            run_pass("warm-up", [profiled], DESK_PHASES, 10, 1, desk_trip)
            print_pass(run_pass(f"SQLite, 1 instance, {args.clients} clients (under cProfile)", [profiled], DESK_PHASES,
                                args.concurrent, args.clients, desk_trip))
        finally:
            profiled.stop()
        print_cprofile(stats_file, args.lines)

    if args.count_sql:
        counters = Counters(folder / "counters.bin")
        counted = start_desk("sqlite-counted", folder, f"sqlite:///{folder / 'desk-counted.db'}", log_level=args.log_level,
                             command=[sys.executable, str(Path(__file__).resolve()), "serve-counted", str(folder / "counters.bin")])
        try:
            run_pass("warm-up", [counted], DESK_PHASES, 5, 1, desk_trip)
            counters.forget_longest_pause()
            gc_before = counters.gc()
            tally = run_pass("counted", [counted], DESK_PHASES, args.count_n, 1, desk_trip, counters=counters.sql).tally
            print_counts(tally, gc_before, counters.gc())
        finally:
            counted.stop()

    if args.postgres:
        with postgres() as cluster:
            if cluster:
                raw = pyspy_output(args.profile) if args.profile and profiling_postgres else None
                stats = Path(args.cprofile) if args.cprofile and profiling_postgres else None
                if stats is not None:
                    stats.parent.mkdir(parents=True, exist_ok=True)
                a = start_desk("pg-a", folder, cluster.url, log_level=args.log_level,
                               wrap=pyspy_wrap(raw) if raw is not None else None,
                               command=[sys.executable, str(Path(__file__).resolve()), "serve-profiled", str(stats)]
                               if stats is not None else None)
                b = start_desk("pg-b", folder, cluster.url, log_level=args.log_level)
                try:
                    run_pass("warm-up", [a, b], DESK_PHASES, 10, 2, desk_trip)
                    results["pg seq"] = run_pass("PostgreSQL, 2 instances, sequential (one instance)", [a], DESK_PHASES,
                                                 args.sequential, 1, desk_trip, per_step_cpu=True, cluster=cluster)
                    print_pass(results["pg seq"])
                    results["pg conc"] = run_pass(f"PostgreSQL, 2 instances, {args.clients} clients", [a, b], DESK_PHASES,
                                                  args.concurrent, args.clients, desk_trip, cluster=cluster)
                    print_pass(results["pg conc"])
                finally:
                    a.stop()
                    b.stop()
                    a.proc.wait(timeout=60)
                if raw is not None:
                    print(f"\nprofile of the first PostgreSQL instance, both passes ({raw}):")
                    profile_tops(raw, PROFILED_ROUTES, args.lines)
                if stats is not None:
                    print_cprofile(stats, args.lines)

    ah: dict[str, Pass] = {}
    python = awaithumans_python(folder, args.awaithumans_python) if args.awaithumans else None
    if not args.awaithumans:
        print("\nawaithumans: not run (--no-awaithumans)")
    if python:
        server, token = start_awaithumans(python, folder, args.log_level)
        try:
            def ah_trip(http: Http, steps: Steps, n: int) -> None:
                ah_round_trip(http, steps, token, n)

            def ah_parked(http: Http, steps: Steps, n: int) -> None:
                ah_round_trip(http, steps, token, n, parked=True)

            run_pass("warm-up", [server], AH_PHASES, 10, 1, ah_trip)
            ah["seq"] = run_pass("awaithumans 0.1.12, SQLite, sequential", [server], AH_PHASES, args.sequential, 1, ah_trip,
                                 per_step_cpu=True)
            print_pass(ah["seq"])
            ah["conc"] = run_pass(f"awaithumans 0.1.12, SQLite, {args.clients} clients (stopped after 60 s)", [server], AH_PHASES,
                                  args.concurrent, args.clients, ah_trip, deadline_s=60)
            print_pass(ah["conc"])
            ah["parked"] = run_pass("awaithumans 0.1.12, parked poll", [server], AH_PHASES, args.awaithumans_parked, 1, ah_parked)
            print_pass(ah["parked"])
        finally:
            server.stop()

    print("\nsummary")
    for key, p in results.items():
        rate, cpu = p.tally.done / p.wall, 1000 * p.cpu / max(p.tally.done, 1)
        line = f"   {p.name:<55} {rate:>7.1f}/s {cpu:>7.1f} ms CPU"
        ref = ah.get(key.removeprefix("pg "))
        if ref and ref.tally.done and p.tally.done and key == "parked":
            line += (f" | push lag p50/p99 {1000 * statistics.median(p.tally.lag):.1f}/{1000 * pct(p.tally.lag, 99):.1f} ms,"
                     f" awaithumans {1000 * statistics.median(ref.tally.lag):.0f}/{1000 * pct(ref.tally.lag, 99):.0f} ms")
        elif ref and ref.tally.done and p.tally.done:
            ref_rate, ref_cpu = ref.tally.done / ref.wall, ref.cpu / ref.tally.done * 1000
            line += f" | vs awaithumans: {rate / ref_rate:.2f}x round trips/s, {cpu / ref_cpu:.2f}x CPU per round trip"
        print(line)
    if args.awaithumans and not python:
        print("   awaithumans: no reference in this run (not installable)")
    if "seq" in results and "conc" in results and results["seq"].tally.done:
        s, c = results["seq"], results["conc"]
        print(f"   SQLite {args.clients} clients / 1 client: {(c.tally.done / c.wall) / (s.tally.done / s.wall):.2f}x")
    if "seq" in results and "pair" in results and results["seq"].tally.done:
        s, c = results["seq"], results["pair"]
        print(f"   SQLite {args.clients} clients on 2 instances / 1 client: {(c.tally.done / c.wall) / (s.tally.done / s.wall):.2f}x")
    if "pg seq" in results and "pg conc" in results and results["pg seq"].tally.done:
        s, c = results["pg seq"], results["pg conc"]
        print(f"   PostgreSQL {args.clients} clients on 2 instances / 1 client: {(c.tally.done / c.wall) / (s.tally.done / s.wall):.2f}x")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in ("serve-counted", "serve-profiled"):
        sys.path.insert(0, str(ROOT))
        (serve_counted if sys.argv[1] == "serve-counted" else serve_profiled)(sys.argv[2], sys.argv[3:])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sequential", type=int, default=150, help="round trips by one client (default 150)")
    parser.add_argument("--concurrent", type=int, default=300, help="round trips by --clients clients (default 300)")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients (default 20)")
    parser.add_argument("--parked", type=int, default=200, help="round trips with the long-poll parked first (default 200)")
    parser.add_argument("--awaithumans-parked", type=int, default=20, help="parked round trips for awaithumans, ~1 s each (default 20)")
    parser.add_argument("--no-postgres", dest="postgres", action="store_false", help="skip the PostgreSQL passes")
    parser.add_argument("--no-sqlite-pair", dest="sqlite_pair", action="store_false",
                        help="skip the pass with two instances on one SQLite file")
    parser.add_argument("--no-awaithumans", dest="awaithumans", action="store_false", help="skip the awaithumans reference")
    parser.add_argument("--awaithumans-python", metavar="PATH", help="a python with awaithumans[server]==0.1.12 already installed")
    parser.add_argument("--count-sql", action="store_true", help="count SQL statements and transactions per step")
    parser.add_argument("--profile", metavar="DIR", help="run the concurrent SQLite pass under py-spy, write the raw profile to DIR")
    parser.add_argument("--count-n", type=int, default=100, help="round trips of the --count-sql pass (default 100)")
    parser.add_argument("--cprofile", metavar="FILE", help="run a concurrent SQLite pass under cProfile, write its stats to FILE")
    parser.add_argument("--profile-on", choices=("sqlite", "postgres"), default="sqlite",
                        help="which database's server --profile and --cprofile profile (default sqlite)")
    parser.add_argument("--lines", type=int, default=25, help="lines per profile top (default 25)")
    parser.add_argument("--log-level", default="warning", help="the servers' log level (default warning)")
    main(parser.parse_args())
