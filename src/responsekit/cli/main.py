"""The `responsekit` command."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError

from ..config import load_settings, parse_pairs, parse_upstream
from ..operations import logs
from ..orchestration.sealing import rotate_keys
from . import connect_claude as claude_setup
from . import connect_codex as codex_setup
from . import connect_gemini as gemini_setup
from .served import ServedModel, served_models, window_of

if TYPE_CHECKING:
    from ..store.api_keys import ApiKey, KeyTable

app = typer.Typer(no_args_is_help=True, add_completion=False, help="The OpenAI Responses API for any model.")


@app.callback()
def main() -> None:
    """The OpenAI Responses API for any model."""


@app.command()
def serve(
    upstream: Annotated[
        list[str] | None,
        typer.Option("--upstream", "-u", help="An OpenAI-compatible engine: URL or NAME=URL (repeatable).", show_default=False),
    ] = None,
    alias: Annotated[
        list[str] | None,
        typer.Option("--alias", help="ALIAS=MODEL: serve MODEL under another name (repeatable).", show_default=False),
    ] = None,
    default_model: Annotated[
        str | None, typer.Option(help="Serve model names no upstream knows with this model.", show_default=False)
    ] = None,
    balance: Annotated[
        str | None,
        typer.Option(help="How a pool of upstreams serving one model picks a member: affinity, least_loaded, "
                     "round_robin (default: affinity).", show_default=False),
    ] = None,
    no_default_model: Annotated[
        bool,
        typer.Option("--no-default-model", help="With no engine configured or found, serve nothing instead of the "
                     "embedded Gemma 3 270M (RESPONSEKIT_DEFAULT_MODEL_FALLBACK=false).", show_default=False),
    ] = False,
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (default: 127.0.0.1, or all interfaces with API keys).", show_default=False),
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (default: 8400).", show_default=False)] = None,
    probe: Annotated[
        bool | None,
        typer.Option("--probe/--no-probe", help="With no upstream, look for engines on their usual ports (default: on).", show_default=False),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where state is kept (default: ~/.local/share/responsekit).", show_default=False)
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(help="postgresql://… to share state between replicas (default: SQLite in the data dir).", show_default=False),
    ] = None,
    api_key: Annotated[
        list[str] | None,
        typer.Option("--api-key", help="An accepted API key, or sha256:HEX of one (repeatable).", show_default=False),
    ] = None,
    metrics: Annotated[
        bool | None,
        typer.Option("--metrics/--no-metrics", help="Serve Prometheus metrics at /metrics (default: on).", show_default=False),
    ] = None,
    record: Annotated[
        Path | None, typer.Option(help="Write every upstream exchange as a JSON file into this directory.", show_default=False)
    ] = None,
    shutdown_timeout: Annotated[
        float | None, typer.Option(help="On SIGTERM, seconds in-flight streams get to finish (default: 30).", show_default=False)
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning or error (default: info).", show_default=False)] = None,
    log_format: Annotated[
        str | None,
        typer.Option(help="text, or json: one JSON object per log line, with request ids (default: text).", show_default=False),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="A TOML settings file (default: $RESPONSEKIT_CONFIG).", show_default=False)
    ] = None,
    model: Annotated[
        Path | None, typer.Option("--model", help="Run this GGUF model in-process (llama.cpp; the `llama` extra).", show_default=False)
    ] = None,
    hf_repo: Annotated[
        str | None, typer.Option("--hf-repo", help="Run a GGUF from this Hugging Face repository (with --hf-file).", show_default=False)
    ] = None,
    hf_file: Annotated[
        str | None, typer.Option("--hf-file", help="The GGUF file of --hf-repo to download and run.", show_default=False)
    ] = None,
    web_search_provider: Annotated[
        str | None,
        typer.Option(help="The search engine of the web_search tools: searxng, brave, tavily or exa.", show_default=False),
    ] = None,
    web_search_url: Annotated[
        str | None,
        typer.Option(help="The search engine's base URL (required for searxng; default: the vendor's API).", show_default=False),
    ] = None,
    web_search_api_key: Annotated[
        str | None, typer.Option(help="The search engine's API key (brave, tavily, exa).", show_default=False)
    ] = None,
    web_search_max_results: Annotated[
        int | None, typer.Option(help="Results per web search the model reads (default: 5).", show_default=False)
    ] = None,
    chat_template: Annotated[
        Path | None,
        typer.Option("--chat-template", help="For --model/--hf-repo: a Jinja file or tokenizer_config.json overriding the GGUF's template (or the built-in one chosen when the GGUF has none).", show_default=False),
    ] = None,
) -> None:
    """Serve /v1/responses and /v1/chat/completions in front of your engines."""
    local = None
    if model is not None or hf_repo is not None or hf_file is not None:
        local = [{"path": model, "hf_repo": hf_repo, "hf_file": hf_file, "chat_template": chat_template}]
    elif chat_template is not None:
        raise typer.BadParameter("--chat-template goes with --model or --hf-repo")
    try:
        settings = load_settings(
            config,
            upstreams=[parse_upstream(value) for value in upstream] if upstream else None,
            aliases=parse_pairs(",".join(alias)) if alias else None,
            default_model=default_model,
            balance=balance,
            default_model_fallback=False if no_default_model else None,
            host=host,
            port=port,
            probe=probe,
            data_dir=data_dir,
            database_url=database_url,
            api_keys=api_key,
            metrics=metrics,
            record_dir=record,
            shutdown_timeout=shutdown_timeout,
            log_level=log_level,
            log_format=log_format,
            models=local,
            web_search_provider=web_search_provider,
            web_search_url=web_search_url,
            web_search_api_key=web_search_api_key,
            web_search_max_results=web_search_max_results,
        )
    except (ValidationError, ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc)) from None
    logs.configure(settings.log_level, settings.log_format)
    # Imported here: the app's modules (FastAPI, the SDKs' types, MCP) take 2 s of CPU to import,
    # which `connect`, `keys` and the other commands do not need.
    from ..app import create_app

    application = create_app(settings)
    # What is loaded by now (modules, classes, the app: ~130k objects) stays for the process's
    # life: left out of garbage collection. Under load, requests in flight push the collector
    # into full collections, and each walked all of them: ~95 ms apiece, 17 in 20 s of 64
    # concurrent streams (8% of the time, a stall of every stream each time); now ~8 ms.
    gc.collect()
    gc.freeze()
    uvicorn.run(
        application,
        host=settings.listen_host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        log_config=None,
        access_log=False,  # the app writes its own, after the answer, with its duration (logs.py)
        timeout_graceful_shutdown=settings.shutdown_timeout,
    )


connect = typer.Typer(no_args_is_help=True, help="Point a client at a running ResponseKit.")
app.add_typer(connect, name="connect")


@connect.command("codex")
def connect_codex(
    url: Annotated[str, typer.Option(help="ResponseKit's base URL.")] = "http://127.0.0.1:8400/v1",
    model: Annotated[str | None, typer.Option(help="Codex's default model (default: the first served).")] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Environment variable holding the API key Codex sends.", show_default=False)
    ] = None,
    context_window: Annotated[
        int, typer.Option(help="Context window the catalog states for a model whose window the server does not know.")
    ] = 131072,
    codex: Annotated[str | None, typer.Option(help="The codex binary (default: on PATH).", show_default=False)] = None,
    codex_home: Annotated[
        Path, typer.Option(envvar="CODEX_HOME", help="Codex's home, where --write puts the files.")
    ] = Path.home() / ".codex",
    write: Annotated[bool, typer.Option("--write", help="Write config.toml and the catalog instead of printing.")] = False,
) -> None:
    """A Codex provider entry and model catalog for the models ResponseKit serves."""
    base_url = url.rstrip("/")
    models = _served(base_url, os.environ.get(api_key_env) if api_key_env else None)
    binary = codex_setup.find_codex(codex)
    if binary is None:
        template = codex_setup.BASE_ENTRY
        typer.echo("codex not found: the catalog holds no instructions for Codex to send (it takes its own from "
                   "`codex debug models`); give --codex BINARY, or run this again where codex is installed", err=True)  # fmt: skip
    else:
        template = codex_setup.pick_template(codex_setup.codex_catalog(binary))
    if unknown := [served.id for served in models if served.context_window is None]:
        typer.echo(f"the server does not know the context window of {', '.join(unknown)}: the catalog states "
                   f"{context_window} tokens (--context-window)", err=True)  # fmt: skip
    catalog = codex_setup.catalog_for(models, template, context_window)
    catalog_path = codex_home / "responsekit-models.json"
    config_path = codex_home / "config.toml"
    existing = config_path.read_text() if write and config_path.exists() else ""
    config = codex_setup.config_document(existing, base_url, model or models[0].id, catalog_path, api_key_env)
    if not write:
        typer.echo(f"{config}# and {catalog_path}:\n{json.dumps(catalog, indent=1)}")
        return
    codex_home.mkdir(parents=True, exist_ok=True)
    catalog_path.write_text(json.dumps(catalog, indent=1))
    config_path.write_text(config)
    typer.echo(f"wrote {config_path} and {catalog_path}")



def _served(base_url: str, api_key: str | None) -> list[ServedModel]:
    """The models `base_url` serves, for a `connect` command; none, or no answer, is the user's error."""
    try:
        models = served_models(base_url, api_key)
    except Exception as exc:  # noqa: BLE001
        raise typer.BadParameter(f"cannot list the models of {base_url}: {exc}") from None
    if not models:
        raise typer.BadParameter(f"{base_url} serves no model yet")
    return models

@connect.command("claude")
def connect_claude(
    url: Annotated[str, typer.Option(help="ResponseKit's base URL (with or without /v1).")] = "http://127.0.0.1:8400",
    model: Annotated[str | None, typer.Option(help="Claude Code's model (default: the first served).")] = None,
    small_model: Annotated[
        str | None, typer.Option(help="The model for the haiku alias and background requests (default: --model).")
    ] = None,
    api_key: Annotated[
        str, typer.Option(help="The API key Claude Code sends (any value when the server takes no keys).")
    ] = "unused",
    claude_home: Annotated[
        Path, typer.Option(envvar="CLAUDE_CONFIG_DIR", help="Claude Code's home, where --write merges settings.json.")
    ] = Path.home() / ".claude",
    shell: Annotated[bool, typer.Option("--shell", help="Print `export` lines instead of what settings.json needs.")] = False,
    write: Annotated[bool, typer.Option("--write", help="Merge it into settings.json instead of printing.")] = False,
) -> None:
    """The environment (settings.json `env`) that points Claude Code at ResponseKit's models."""
    root = claude_setup.root_url(url)
    models = _served(f"{root}/v1", api_key)
    chosen = model or models[0].id
    small = small_model or chosen
    names = list(dict.fromkeys((chosen, small)))
    known = {name: window for name in names if (window := window_of(models, name)) is not None}
    if len(known) < len(names):
        told = "Claude Code is told the other's" if known else "Claude Code is not told when to compact (it assumes 1,000,000 tokens)"
        typer.echo(f"the server does not know the context window of {' or '.join(set(names) - set(known))}: {told}; "
                   "set the upstream's context_window (docs/engines.md) and run this again", err=True)  # fmt: skip
    env = claude_setup.claude_env(root, api_key, chosen, small, min(known.values(), default=None))
    if not write:
        typer.echo(claude_setup.shell_exports(env) if shell else claude_setup.settings_fragment(env))
        return
    settings_path = claude_home / "settings.json"
    existing = settings_path.read_text() if settings_path.exists() else ""
    try:
        document = claude_setup.settings_document(existing, env)
    except (ValueError, TypeError) as exc:  # not JSON, or not the shape settings.json has
        raise typer.BadParameter(f"{settings_path}: {exc}") from None
    claude_home.mkdir(parents=True, exist_ok=True)
    settings_path.write_text(document)
    typer.echo(f"wrote {settings_path}")


@connect.command("gemini")
def connect_gemini(
    url: Annotated[str, typer.Option(help="ResponseKit's base URL (with or without /v1).")] = "http://127.0.0.1:8400",
    model: Annotated[str | None, typer.Option(help="Gemini CLI's model (default: the first served).")] = None,
    api_key: Annotated[
        str, typer.Option(help="The API key Gemini CLI sends (any value when the server takes no keys).")
    ] = "unused",
    gemini_dir: Annotated[
        Path | None,
        typer.Option(help="Gemini CLI's directory, where --write merges settings.json and .env "
                     "(default: ~/.gemini, $GEMINI_CLI_HOME/.gemini when set).", show_default=False),
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="Merge it into settings.json and .env instead of printing.")
    ] = False,
) -> None:
    """The environment and settings.json entries that point Gemini CLI at ResponseKit's models."""
    root = gemini_setup.root_url(url)
    models = _served(f"{root}/v1", api_key)
    chosen = model or models[0].id
    window = window_of(models, chosen)
    if window is None:
        typer.echo(f"the server does not know the context window of {chosen}: Gemini CLI is not told when to "
                   "compress (it assumes 1,048,576 tokens); set the upstream's context_window (docs/engines.md) "
                   "and run this again", err=True)  # fmt: skip
    env = gemini_setup.gemini_env(root, api_key, chosen)
    settings = gemini_setup.gemini_settings(chosen, window)
    if not write:
        typer.echo(gemini_setup.printed(env, settings))
        return
    directory = gemini_dir or gemini_setup.gemini_dir()
    settings_path, env_path = directory / "settings.json", directory / ".env"
    try:
        document = gemini_setup.settings_document(settings_path.read_text() if settings_path.exists() else "", settings)
    except (ValueError, TypeError) as exc:  # not JSON (comments too), or not the shape settings.json has
        raise typer.BadParameter(f"{settings_path}: {exc}") from None
    directory.mkdir(parents=True, exist_ok=True)
    settings_path.write_text(document)
    if not env_path.exists():
        env_path.touch(mode=0o600)  # it holds the key
    env_path.write_text(gemini_setup.env_document(env_path.read_text() if env_path.exists() else "", env))
    typer.echo(f"wrote {settings_path} and {env_path}")


keys = typer.Typer(no_args_is_help=True, help="Keys that seal reasoning and compaction blobs.")
app.add_typer(keys, name="keys")


@keys.command("rotate")
def rotate(
    data_dir: Annotated[Path | None, typer.Option(help="The data directory (default: the configured one).")] = None,
) -> None:
    """Put a new sealing key in front; blobs sealed with the older keys still open."""
    directory = data_dir or load_settings().data_dir
    rotate_keys(directory)
    typer.echo(f"rotated the sealing keys in {directory}; restart the server to use the new key")


files = typer.Typer(no_args_is_help=True, help="Files and vector stores of a running ResponseKit.")
app.add_typer(files, name="files")


@files.command("add")
def files_add(
    directory: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="The directory to add (recursively).")],
    vector_store: Annotated[str, typer.Option("--vector-store", help="The vector store's name; made if missing.")],
    url: Annotated[str, typer.Option(help="ResponseKit's base URL.")] = "http://127.0.0.1:8400/v1",
    api_key: Annotated[
        str, typer.Option(envvar="OPENAI_API_KEY", help="The API key the files will belong to.", show_default=False)
    ] = "unused",
) -> None:
    """Upload a directory's files into a vector store and wait until they are searchable."""
    import openai
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..files.upload import add_files, files_in
    from ..files.upload import vector_store as find_store

    paths, skipped = files_in(directory)
    for path in skipped:
        typer.echo(f"skipped (unsupported type): {path}", err=True)
    if not paths:
        raise typer.BadParameter(f"no supported file under {directory}")
    client = openai.OpenAI(base_url=url.rstrip("/"), api_key=api_key, max_retries=2)
    try:
        store = find_store(client, vector_store)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns) as progress:
            uploading = progress.add_task("uploading", total=len(paths))
            ingesting = progress.add_task("ingesting", total=len(paths))
            failed = add_files(
                client, store, paths,
                uploaded=lambda path: progress.advance(uploading),
                ingested=lambda done, total: progress.update(ingesting, completed=done, total=total),
            )  # fmt: skip
    except openai.APIError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    for name, reason in failed:
        typer.echo(f"failed: {name}: {reason}", err=True)
    typer.echo(f"{len(paths) - len(failed)} of {len(paths)} files searchable in {vector_store} ({store.id})")
    if failed:
        raise typer.Exit(1)


template_commands = typer.Typer(no_args_is_help=True, help="What a chat template says about its model's output.")
app.add_typer(template_commands, name="template")


@template_commands.command("inspect")
def template_inspect(
    file: Annotated[Path, typer.Argument(help="A Jinja template, a GGUF model or a tokenizer_config.json.")],
) -> None:
    """The reasoning and tool-call syntax derived from the template by rendering probe
    conversations, and the hand-written format whose markers it holds, if any."""
    from ..backends.model_prompting import ModelPrompting
    from ..prompting.derive import derive
    from ..prompting.templates import TemplateError, load_template

    try:
        template = load_template(file)
    except TemplateError as exc:
        raise typer.BadParameter(str(exc)) from None
    lines = derive(template).describe()
    prompting = ModelPrompting(file.stem, template)
    lines.append(("parser under auto", f"{prompting.format or 'none'}: {prompting.why}"))
    width = max(len(label) for label, _ in lines)
    for label, value in lines:
        typer.echo(f"{label + ':':<{width + 1}} {value}")


api_keys = typer.Typer(no_args_is_help=True, help="API keys kept in the store (the server sees changes within a second).")
app.add_typer(api_keys, name="api-keys")

DataDir = Annotated[
    Path | None, typer.Option(help="Where state is kept (default: the configured one).", show_default=False)
]
DatabaseUrl = Annotated[
    str | None, typer.Option(help="postgresql://… of the server (default: SQLite in the data dir).", show_default=False)
]
ConfigFile = Annotated[Path | None, typer.Option(help="A TOML settings file.", show_default=False)]


def _on_table(config: Path | None, data_dir: Path | None, database_url: str | None,
              action: Callable[[KeyTable], Awaitable[Any]]) -> Any:  # fmt: skip
    """`action` on the key table of the database `serve` would use with these options."""
    from .api_keys import open_table

    async def run() -> Any:
        async with open_table(_database(config, data_dir, database_url)) as table:
            return await action(table)

    return asyncio.run(run())

@api_keys.command("create")
def api_keys_create(
    name: Annotated[str, typer.Option(help="What the key is for (shown in listings).")],
    team: Annotated[str | None, typer.Option(help="The team it belongs to.", show_default=False)] = None,
    models: Annotated[
        str | None, typer.Option(help="The models it may use, comma-separated (default: all).", show_default=False)
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option(help="When it stops working: an ISO date or time (UTC unless it says), or a span "
                     "from now such as 30d, 12h or 90m.", show_default=False),
    ] = None,
    rpm: Annotated[int | None, typer.Option("--rpm", min=1, help="Requests per minute.", show_default=False)] = None,
    tpm: Annotated[int | None, typer.Option("--tpm", min=1, help="Tokens per minute.", show_default=False)] = None,
    max_concurrent: Annotated[int | None, typer.Option(min=1, help="Requests at once.", show_default=False)] = None,
    daily_tokens: Annotated[int | None, typer.Option(min=1, help="Tokens per UTC day.", show_default=False)] = None,
    monthly_tokens: Annotated[int | None, typer.Option(min=1, help="Tokens per UTC month.", show_default=False)] = None,
    weight: Annotated[float, typer.Option(min=0.001, max=1000, help="Its share of a busy engine against other keys.")] = 1.0,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    config: ConfigFile = None,
) -> None:
    """Make a key; its secret is printed once, alone on the last line (only its hash is kept)."""
    from ..store.api_keys import Limits
    from .api_keys import expiry

    try:
        expires_at = expiry(expires) if expires else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--expires") from None
    limits = Limits(rpm=rpm, tpm=tpm, max_concurrent=max_concurrent, daily_tokens=daily_tokens,
                    monthly_tokens=monthly_tokens)  # fmt: skip
    chosen = [model.strip() for model in models.split(",") if model.strip()] if models is not None else None

    key, secret = _on_table(config, data_dir, database_url, lambda table: table.create(
        name, team=team, models=chosen, expires_at=expires_at, limits=limits, weight=weight))
    for line in _describe(key.body()):
        typer.echo(line)
    typer.echo(secret)


@api_keys.command("list")
def api_keys_list(
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    config: ConfigFile = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per key.")] = False,
) -> None:
    """Every stored key (revoked ones too), oldest first."""
    for key in _on_table(config, data_dir, database_url, lambda table: table.listing()):
        body = key.body()
        if as_json:
            typer.echo(json.dumps(body))
            continue
        state = "revoked" if body["revoked_at"] else "expired" if not key.usable(time.time()) else "active"
        typer.echo(f"{body['id']}  {state:<7}  {body['redacted_value']}  {body['name']}"
                   + (f"  (team {body['team']})" if body["team"] else ""))  # fmt: skip


@api_keys.command("show")
def api_keys_show(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_…).")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    config: ConfigFile = None,
) -> None:
    """One key's fields, as JSON."""
    key = _found(key_id, _on_table(config, data_dir, database_url, lambda table: table.get(key_id)))
    typer.echo(json.dumps(key.body(), indent=2))


@api_keys.command("revoke")
def api_keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_…).")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    config: ConfigFile = None,
) -> None:
    """Refuse the key from now on, on every replica."""
    key = _found(key_id, _on_table(config, data_dir, database_url, lambda table: table.revoke(key_id)))
    typer.echo(f"revoked {key.id} ({key.name})")


def _found(key_id: str, key: ApiKey | None) -> ApiKey:
    """The key, or the command's error: exit status 1."""
    if key is None:
        typer.echo(f"no API key {key_id}", err=True)
        raise typer.Exit(1)
    return key


def _database(config: Path | None, data_dir: Path | None, database_url: str | None) -> str:
    """The database `serve` would use with these options."""
    try:
        return load_settings(config, data_dir=data_dir, database_url=database_url).database
    except (ValidationError, ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc)) from None


def _describe(body: dict[str, Any]) -> list[str]:
    limits = ", ".join(f"{name} {value}" for name, value in body["limits"].items() if value is not None)
    lines = [f"id: {body['id']}", f"name: {body['name']}"]
    if body["team"]:
        lines.append(f"team: {body['team']}")
    lines.append(f"models: {', '.join(body['models']) if body['models'] is not None else 'all'}")
    if body["expires_at"]:
        lines.append(f"expires: {datetime.fromtimestamp(body['expires_at'], UTC).isoformat()}")
    lines.append(f"limits: {limits or 'none of its own'}")
    lines.append("the key (shown this once; only its hash is kept):")
    return lines
