"""The `responsekit` command."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer
import uvicorn
from pydantic import ValidationError
from rich.logging import RichHandler

from .app import create_app
from .config import load_settings, parse_pairs, parse_upstream

app = typer.Typer(no_args_is_help=True, add_completion=False, help="The OpenAI Responses API for any model.")


@app.callback()
def main() -> None:
    """The OpenAI Responses API for any model."""


@app.command()
def serve(
    upstream: Annotated[
        Optional[list[str]],
        typer.Option("--upstream", "-u", help="An OpenAI-compatible engine: URL or NAME=URL (repeatable).", show_default=False),
    ] = None,
    alias: Annotated[
        Optional[list[str]],
        typer.Option("--alias", help="ALIAS=MODEL: serve MODEL under another name (repeatable).", show_default=False),
    ] = None,
    default_model: Annotated[
        Optional[str], typer.Option(help="Serve model names no upstream knows with this model.", show_default=False)
    ] = None,
    host: Annotated[
        Optional[str],
        typer.Option(help="Address to listen on (default: 127.0.0.1, or all interfaces with API keys).", show_default=False),
    ] = None,
    port: Annotated[Optional[int], typer.Option(help="Port to listen on (default: 8400).", show_default=False)] = None,
    probe: Annotated[
        Optional[bool],
        typer.Option("--probe/--no-probe", help="With no upstream, look for engines on their usual ports (default: on).", show_default=False),
    ] = None,
    data_dir: Annotated[
        Optional[Path], typer.Option(help="Where state is kept (default: ~/.local/share/responsekit).", show_default=False)
    ] = None,
    database_url: Annotated[
        Optional[str],
        typer.Option(help="postgresql://… to share state between replicas (default: SQLite in the data dir).", show_default=False),
    ] = None,
    api_key: Annotated[
        Optional[list[str]],
        typer.Option("--api-key", help="An accepted API key, or sha256:HEX of one (repeatable).", show_default=False),
    ] = None,
    record: Annotated[
        Optional[Path], typer.Option(help="Write every upstream exchange as a JSON file into this directory.", show_default=False)
    ] = None,
    shutdown_timeout: Annotated[
        Optional[float], typer.Option(help="On SIGTERM, seconds in-flight streams get to finish (default: 30).", show_default=False)
    ] = None,
    log_level: Annotated[Optional[str], typer.Option(help="debug, info, warning or error (default: info).", show_default=False)] = None,
    config: Annotated[
        Optional[Path], typer.Option(help="A TOML settings file (default: $RESPONSEKIT_CONFIG).", show_default=False)
    ] = None,
) -> None:
    """Serve /v1/responses and /v1/chat/completions in front of your engines."""
    try:
        settings = load_settings(
            config,
            upstreams=[parse_upstream(value) for value in upstream] if upstream else None,
            aliases=parse_pairs(",".join(alias)) if alias else None,
            default_model=default_model,
            host=host,
            port=port,
            probe=probe,
            data_dir=data_dir,
            database_url=database_url,
            api_keys=api_key,
            record_dir=record,
            shutdown_timeout=shutdown_timeout,
            log_level=log_level,
        )
    except (ValidationError, ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc)) from None
    level = settings.log_level.upper()
    logging.basicConfig(level=level, format="%(message)s", handlers=[RichHandler(show_path=False)], force=True)
    uvicorn.run(
        create_app(settings),
        host=settings.listen_host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        log_config=None,
        timeout_graceful_shutdown=settings.shutdown_timeout,
    )
