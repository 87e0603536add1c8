"""The `handoff` command line."""

from __future__ import annotations

import asyncio
import textwrap
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from bot.config import Config, ConfigError, ProviderFront, config_warnings, exposure_problems, load_config

app = typer.Typer(
    help="Handoff Desk: hand a conversation from an AI agent to a person, and back.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Database schema commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")

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
    for warning in config_warnings(cfg):
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
    warnings = config_warnings(cfg)
    if warnings:  # the config is valid (exit 0); these are worth a look before going live
        typer.echo(f"{file}: {len(warnings)} warning(s):")
        for warning in warnings:
            typer.echo(f"  warning: {warning}")
    if probe and not asyncio.run(_probe(cfg)):
        raise typer.Exit(code=1)


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

    if database_url:
        url = database_url
    elif config is not None:
        url = _load_or_exit(config).database_url
    else:
        typer.echo("give --config FILE or --database-url URL", err=True)
        raise typer.Exit(code=2)

    async def run() -> None:
        db = Database(url)
        try:
            await db.upgrade()
        finally:
            await db.dispose()

    asyncio.run(run())
    typer.echo(f"database at {url.split('@')[-1]} is up to date")


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
