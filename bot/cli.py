"""The `handoff` command line."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from bot.config import Config, ConfigError, ProviderFront, config_warnings, exposure_problems, load_config
from bot.config.people import Role

if TYPE_CHECKING:
    from bot.domain.people.roster import Roster

app = typer.Typer(
    help="Handoff Desk: hand a conversation from an AI agent to a person, and back.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Database schema commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")
reports_app = typer.Typer(help="The reports' rollups.", no_args_is_help=True)
app.add_typer(reports_app, name="reports")
people_app = typer.Typer(
    help="The people of the desk: add, list, link an identity, disable, enable, change a role. "
         "Each command opens the config's database (upgrading its schema, as serve does) and records "
         "what it changed in the audit trail as \"cli\". Exit codes: 0 done, 1 refused (not found, taken, "
         "the last admin), 2 a wrong value (the message names the field).",
    no_args_is_help=True,
)
app.add_typer(people_app, name="people")

CONFIG_OPTION = typer.Option(..., "--config", "-c", help="Path to the YAML config (see config.example.yaml).")


def _load_or_exit(path: Path) -> Config:
    import bot.flow.siblings  # noqa: F401  (registers the "agent" channel kind before the config names it)

    try:
        return load_config(path)
    except ConfigError as exc:
        typer.echo(f"{path}: {len(exc.problems)} problem(s):", err=True)
        for problem in exc.problems:
            typer.echo(textwrap.indent(str(problem), "  "), err=True)  # a YAML problem shows its lines below it
        raise typer.Exit(code=2) from None


@app.command()
def serve(
    config: Path = CONFIG_OPTION,
    host: str | None = typer.Option(None, help="Override server.host."),
    port: int | None = typer.Option(None, help="Override server.port."),
) -> None:
    """Run the server. Creates or upgrades the database schema on start."""
    from bot.desk import Desk
    from bot.runtime.logs import configure_logging
    from bot.web.app import create_app
    from bot.web.server import serve_until_stopped

    cfg = _load_or_exit(config)
    if host or port:
        server = cfg.server.model_copy(update={k: v for k, v in {"host": host, "port": port}.items() if v})
        cfg = cfg.model_copy(update={"server": server})
        problems = exposure_problems(cfg)  # an override must not slip past the checks the file got
        if problems:
            typer.echo(f"refusing to serve on {cfg.server.host}:", err=True)
            for problem in problems:
                typer.echo(f"  {problem}", err=True)
            raise typer.Exit(code=2)
    configure_logging(cfg.logging.level, cfg.logging.format)
    for warning in _warnings(cfg):
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(f"Handoff Desk on http://{cfg.server.host}:{cfg.server.port}  (inbox: {cfg.public_url}/inbox)", err=True)
    desk = Desk(cfg)
    serve_until_stopped(create_app(desk), before_shutdown=desk.bus.close, **server_options(cfg))


def server_options(cfg: Config) -> dict[str, Any]:
    """How `serve` runs uvicorn: X-Forwarded-For is believed from server.trusted_proxies
    only, the same list the chat's rate limits use."""
    return {
        "host": cfg.server.host, "port": cfg.server.port, "log_level": cfg.logging.level, "server_header": False,
        "proxy_headers": bool(cfg.server.trusted_proxies),
        "forwarded_allow_ips": [str(n) for n in cfg.server.trusted_proxies],
        # Long-polls are answered as shutdown begins (bot/web/server.py); this bounds the wait
        # for other requests still running, below the 10 s a container stop allows.
        "timeout_graceful_shutdown": 5,
    }


@app.command("check-config")
def check_config(
    file: Path = typer.Argument(..., help="The YAML config to check."),
    probe: bool = typer.Option(False, "--probe", help="Also check each channel's credentials against its provider."),
) -> None:
    """Validate a config, naming the key path of every problem. Exits non-zero on any problem;
    warnings alone (a development default, an open inbox, a hosted API) exit 0."""
    cfg = _load_or_exit(file)
    typer.echo(f"{file}: OK ({len(cfg.channels)} channel(s), {len(cfg.fronts)} front(s), agent: {cfg.agent.kind}, "
               f"database: {cfg.database_url.split(':', 1)[0]})")
    for line in _front_lines(cfg):
        typer.echo(f"  {line}")
    warnings = _warnings(cfg)
    if warnings:  # the config is valid (exit 0); these are worth a look before going live
        typer.echo(f"{file}: {len(warnings)} warning(s):")
        for warning in warnings:
            typer.echo(f"  warning: {warning}")
    if probe and not asyncio.run(_probe(cfg)):
        raise typer.Exit(code=1)


def _warnings(cfg: Config) -> list[str]:
    """The config's warnings, and the on-call schedules' gaps in the next 14 days from now
    (worked out by the domain's engine, which the config does not import)."""
    from datetime import UTC, datetime

    from bot.domain.oncall import gap_warnings

    return [*config_warnings(cfg), *gap_warnings(cfg, datetime.now(UTC))]


def _front_lines(cfg: Config) -> list[str]:
    """Where each front is reached, and which adapter serves it."""
    lines = []
    for index, front in enumerate(cfg.fronts):
        if not isinstance(front, ProviderFront):
            lines.append(f"fronts[{index}] (web): {cfg.public_url}/chat, widget {cfg.public_url}/widget.js")
        elif front.shares_channel:
            lines.append(f"fronts[{index}] ({front.kind} '{front.name}'): served by channel {front.channel_id}, same connection")
        else:
            lines.append(f"fronts[{index}] ({front.kind} '{front.name}'): an adapter of its own, id {front.channel_id} "
                         f"(provider webhooks, if it takes them: {cfg.public_url}/webhooks/{front.channel_id})")
    return lines


async def _probe(cfg: Config) -> bool:
    from channels import adapter_class
    from channels.base import ChannelError

    ok = True
    own_fronts = [(f"fronts[{cfg.fronts.index(f)}]", f.settings) for f in cfg.provider_fronts if not f.shares_channel]
    for where, channel in [*((f"channels[{n}]", c) for n, c in enumerate(cfg.channels)), *own_fronts]:
        adapter = adapter_class(channel.kind)(channel)
        try:
            who = await adapter.probe()
            typer.echo(f"  {where} ({channel.kind} '{channel.label}'): ok, {who}")
        except ChannelError as exc:
            ok = False
            typer.echo(f"  {where} ({channel.kind} '{channel.label}'): FAILED, {exc.hint}", err=True)
        finally:
            await adapter.stop()
    return ok


@db_app.command("upgrade")
def db_upgrade(
    config: Path | None = typer.Option(None, "--config", "-c", help="Take database_url from this config."),
    database_url: str | None = typer.Option(None, "--database-url", envvar="HANDOFF_DATABASE_URL", help="Or give the URL."),
) -> None:
    """Apply the database migrations (alembic) up to the newest."""
    from bot.store.db import Database

    url = _database_url(config, database_url)

    async def run() -> None:
        db = Database(url)
        try:
            await db.upgrade()
        finally:
            await db.dispose()

    asyncio.run(run())
    typer.echo(f"database at {url.split('@')[-1]} is up to date")


def _database_url(config: Path | None, database_url: str | None) -> str:
    """The URL given, else the config's; neither: say what to give and exit 2."""
    if database_url:
        return database_url
    if config is not None:
        return _load_or_exit(config).database_url
    typer.echo("give --config FILE or --database-url URL", err=True)
    raise typer.Exit(code=2)


@reports_app.command("rebuild")
def reports_rebuild(
    config: Path | None = typer.Option(None, "--config", "-c", help="Take database_url from this config."),
    database_url: str | None = typer.Option(None, "--database-url", envvar="HANDOFF_DATABASE_URL", help="Or give the URL."),
) -> None:
    """Count the reports' rollups afresh from the stored handoffs and conversations (upgrading
    the schema first), in one transaction; a running desk keeps writing (on PostgreSQL its
    writes wait for the count)."""
    from sqlalchemy import func, select

    from bot.domain.handoff_rows import CONVERSATIONS, HANDOFFS
    from bot.store.db import Database
    from bot.store.rollups import rebuild

    url = _database_url(config, database_url)

    async def run() -> tuple[int, int]:
        db = Database(url)
        try:
            await db.upgrade()
            async with db.transaction() as session:
                await rebuild(session, "sqlite" if db.is_sqlite else "postgresql")
                handoffs = (await session.execute(select(func.count()).select_from(HANDOFFS))).scalar_one()
                conversations = (await session.execute(select(func.count()).select_from(CONVERSATIONS))).scalar_one()
            return int(handoffs), int(conversations)
        finally:
            await db.dispose()

    handoffs, conversations = asyncio.run(run())
    typer.echo(f"reports' rollups rebuilt from {handoffs:,} handoffs and {conversations:,} conversations")


@app.command()
def demo(
    pause: float = typer.Option(0.4, help="Seconds between steps, so the story can be followed."),
) -> None:
    """Walk through the whole story offline: a subscriber asks for a person, the handoff
    starts, messages relay both ways, release, and the agent resumes."""
    from bot.demo import run_demo

    asyncio.run(run_demo(pause=pause))


class McpTransport(StrEnum):
    stdio = "stdio"
    http = "http"


@app.command()
def mcp(
    config: Path | None = typer.Option(
        None, "--config", "-c", help="The desk's config: its server.public_url and api.key (--url / --api-key win)."),
    url: str | None = typer.Option(None, "--url", envvar="HANDOFF_URL", help="The running desk's base URL [default: http://127.0.0.1:8000]."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="HANDOFF_API_KEY", help="The desk's api.key, if it has one."),
    transport: McpTransport = typer.Option(McpTransport.stdio, "--transport", help="stdio (Claude Desktop) or http (streamable HTTP at /mcp)."),
    host: str = typer.Option("127.0.0.1", help="With --transport http: the address to listen on (loopback only)."),
    port: int = typer.Option(8765, help="With --transport http: the port to listen on."),
    subscriber_name: str | None = typer.Option(None, "--subscriber-name", help="The person the MCP client is talking to, for the desk's conversations."),
    subscriber_email: str | None = typer.Option(None, "--subscriber-email", help="Their email (the default contact_back_email of a handoff)."),
) -> None:
    """Serve the desk's tools over the Model Context Protocol, for Claude Desktop or any MCP client.

    A bridge to a running desk (`handoff serve`): every call goes through its HTTP API, so its
    validation and audit trail apply. Each MCP session is one desk conversation. Tools: the
    desk's own (handoff_request with the live channel list, ...) plus handoff_status and
    conversation_messages.
    """
    import ipaddress

    from bot.clients.client import DeskClient
    from bot.clients.mcp_server import McpBridge, http_app, serve_stdio

    if config is not None:
        cfg = _load_or_exit(config)
        url = url or cfg.public_url
        api_key = api_key or (cfg.api.key.get_secret_value() if cfg.api.key else None)
    url = url or "http://127.0.0.1:8000"

    if transport is McpTransport.http:
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:  # the endpoint has no authentication of its own, and holds the desk's key
            typer.echo(f"refusing to serve MCP on {host}: the endpoint has no authentication of its own; "
                       "listen on 127.0.0.1 and put an authenticating proxy in front to reach it from elsewhere", err=True)
            raise typer.Exit(code=2)

    async def run() -> None:
        async with DeskClient(url, api_key=api_key) as desk:
            bridge = McpBridge(desk, url=url, subscriber_name=subscriber_name, subscriber_email=subscriber_email)
            if transport is McpTransport.stdio:
                await serve_stdio(bridge)
                return
            import uvicorn

            typer.echo(f"Handoff Desk MCP (streamable HTTP) on http://{host}:{port}/mcp -> desk {url}", err=True)
            server = uvicorn.Server(uvicorn.Config(http_app(bridge, host=host), host=host, port=port,
                                                   log_level="warning", timeout_graceful_shutdown=5))
            await server.serve()

    asyncio.run(run())


# --------------------------------------------------------------------------- people


def _on_roster(config: Path, work: Callable[[Roster], Awaitable[None]]) -> None:
    """Run `work` on the config's directory (under the admin rules, bot/domain/people/roster.py).
    A refusal prints its message, naming the field, and exits 2 for a wrong value, 1 otherwise."""
    from bot.desk import Desk
    from bot.domain.people import InvalidPerson
    from bot.errors import DeskError
    from bot.web.deps import roster_of_desk

    cfg = _load_or_exit(config)

    async def run() -> None:
        desk = Desk(cfg)  # built, never started: only its database and directory are used
        try:
            await desk.db.upgrade()
            await work(roster_of_desk(desk))
        finally:
            await desk.db.dispose()

    try:
        asyncio.run(run())
    except DeskError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(code=2 if isinstance(exc, InvalidPerson) or exc.status == 422 else 1) from None


PERSON_ID = typer.Argument(..., metavar="ID", help="The person's id, such as olga.")


@people_app.command("add")
def people_add(
    pid: str = typer.Argument(..., metavar="ID", help="The new person's id: lower-case letters, digits, - and _, such as olga."),
    name: str = typer.Option(..., "--name", help="What subscribers see on their replies, such as \"Olga from Support\"."),
    email: str = typer.Option(..., "--email", help="Their e-mail address."),
    role: Role | None = typer.Option(None, "--role", help="viewer, agent or admin [default: agent]."),
    timezone: str = typer.Option("UTC", "--timezone", help="An IANA timezone, such as Europe/Berlin."),
    admin: bool = typer.Option(False, "--admin", help="Make them an admin (the same as --role admin): the first admin of an upgraded desk."),
    config: Path = CONFIG_OPTION,
) -> None:
    """Add a person, then print the invitation link they set their password with (it works once)."""
    if admin and role not in (None, Role.ADMIN):
        typer.echo(f"error: role: --admin means the admin role, but --role {role} was given too", err=True)
        raise typer.Exit(code=2)
    chosen = Role.ADMIN if admin else role or Role.AGENT

    async def work(roster: Roster) -> None:
        from bot.domain.people.roster import LinksUnavailable

        person = await roster.people.add(pid=pid, name=name, email=email, role=chosen, timezone=timezone, source="cli", actor="cli")
        typer.echo(f"added {person.id} ({person.name}, {person.role})")
        try:
            typer.echo(f"invitation link (pass it on; it works once): {roster.link(person, 'invite')}")
        except LinksUnavailable as exc:
            typer.echo(f"no invitation link: {exc.message}", err=True)

    _on_roster(config, work)


@people_app.command("list")
def people_list(
    as_json: bool = typer.Option(False, "--json", help="Print the people as JSON, as GET /api/people answers."),
    config: Path = CONFIG_OPTION,
) -> None:
    """List everyone: id, name, e-mail, role, state and linked identities."""

    async def work(roster: Roster) -> None:
        from bot.web.people_api import person_view

        entries = await roster.entries()
        if as_json:
            typer.echo(json.dumps({"people": [person_view(e) for e in entries]}, indent=2))
            return
        rows = [("ID", "NAME", "EMAIL", "ROLE", "STATE", "IDENTITIES")] + [
            (e.person.id, e.person.name, e.person.email, e.person.role, e.state,
             ", ".join(f"{i.kind}:{i.value}" for i in e.identities) or "-") for e in entries]
        widths = [max(len(row[n]) for row in rows) for n in range(5)]
        for row in rows:
            typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[5])

    _on_roster(config, work)


@people_app.command("link")
def people_link(
    pid: str = PERSON_ID,
    kind: str = typer.Argument(..., metavar="KIND", help="A channel kind, as the config's channels: name it (see `handoff check-config`), or sso."),
    value: str = typer.Argument(..., metavar="VALUE", help="The provider's id of the person there: their user id on that channel, or an e-mail address."),
    config: Path = CONFIG_OPTION,
) -> None:
    """Link an identity to a person on your word (recorded as verified by "cli").

    People normally link themselves: signed in to the inbox they get a one-time code and send
    it from the channel, which proves the identity is theirs. Use this where that cannot work.
    An identity already linked to someone else is refused, never moved: unlink it first."""
    from channels import known_kinds

    kinds = [*known_kinds(), "sso"]
    if kind not in kinds:
        typer.echo(f"error: kind: expected one of {', '.join(kinds)}, got {kind!r}", err=True)
        raise typer.Exit(code=2)
    problem = _identity_problem(kind, value)
    if problem:
        typer.echo(f"error: value: {problem}, got {value[:40]!r}", err=True)
        raise typer.Exit(code=2)

    async def work(roster: Roster) -> None:
        from bot.domain.people import IdentityTaken

        person = await roster.people.get(pid)
        try:
            identity = await roster.people.link(person.id, kind, value, verified_via="cli", actor="cli")
        except IdentityTaken:
            owner = await roster.people.resolve(kind, value)
            whose = f"{owner.id} ({owner.name})" if owner is not None else "a disabled person"
            raise IdentityTaken(f"value: the {kind} identity {value} is already linked to {whose}; "
                                f"unlink it from them first (the admin page, People)") from None
        typer.echo(f"linked {identity.kind}:{identity.value} to {person.id} ({person.name})")

    _on_roster(config, work)


def _identity_problem(kind: str, value: str) -> str | None:
    from bot.config.people import email_address

    if kind == "email":
        try:
            email_address(value)
        except ValueError as exc:
            return str(exc)
    if not value or value != value.strip() or len(value) > 320:
        return "1-320 characters with no spaces at its start or end"
    return None


@people_app.command("disable")
def people_disable(pid: str = PERSON_ID, config: Path = CONFIG_OPTION) -> None:
    """Disable a person: their sessions and API tokens end at once; their history stays theirs."""

    async def work(roster: Roster) -> None:
        person = await roster.set_disabled(pid, True, actor="cli")
        typer.echo(f"disabled {person.id} ({person.name}): their sessions and API tokens ended")

    _on_roster(config, work)


@people_app.command("enable")
def people_enable(pid: str = PERSON_ID, config: Path = CONFIG_OPTION) -> None:
    """Enable a disabled person again (sessions and tokens that ended stay ended)."""

    async def work(roster: Roster) -> None:
        person = await roster.set_disabled(pid, False, actor="cli")
        typer.echo(f"enabled {person.id} ({person.name})")

    _on_roster(config, work)


@people_app.command("set-role")
def people_set_role(
    pid: str = PERSON_ID,
    role: Role = typer.Argument(..., metavar="ROLE", help="viewer, agent or admin."),
    config: Path = CONFIG_OPTION,
) -> None:
    """Change a person's role. The last enabled admin stays one unless owner.token is set."""

    async def work(roster: Roster) -> None:
        person = await roster.update(pid, role=role, actor="cli")
        typer.echo(f"{person.id} ({person.name}) is {person.role} now")

    _on_roster(config, work)


@people_app.command("away")
def people_away(
    pid: str = PERSON_ID,
    note: str | None = typer.Option(None, "--note", help="What their status says, such as 'on leave' (200 characters)."),
    until: str | None = typer.Option(None, "--until", help="Until when, ISO 8601 with a timezone: 2026-12-24T18:00+01:00."),
    config: Path = CONFIG_OPTION,
) -> None:
    """Set a person away: teams and on-call schedules pass them over until `back` (or --until)."""
    from datetime import datetime

    from bot.domain.people.availability import InvalidAvailability

    async def work(roster: Roster) -> None:
        try:
            moment = datetime.fromisoformat(until) if until else None
        except ValueError:
            raise InvalidAvailability(f"until: expected ISO 8601 with a timezone such as 2026-12-24T18:00+01:00, "
                                      f"got {until!r}") from None
        assert roster.availability is not None  # roster_of_desk builds it with the desk's
        person = await roster.availability.set_away(pid, until=moment, note=note, via="cli", actor="cli")
        typer.echo(f"{person.id} ({person.name}) is away" + (f" until {person.away_until.isoformat()}" if person.away_until else ""))

    _on_roster(config, work)


@people_app.command("back")
def people_back(pid: str = PERSON_ID, config: Path = CONFIG_OPTION) -> None:
    """Set a person available again."""

    async def work(roster: Roster) -> None:
        assert roster.availability is not None  # roster_of_desk builds it with the desk's
        person = await roster.availability.set_available(pid, via="cli", actor="cli")
        typer.echo(f"{person.id} ({person.name}) is available")

    _on_roster(config, work)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
