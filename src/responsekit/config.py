"""Settings: command-line flags, then `RESPONSEKIT_*` environment variables, then a TOML file.

The precedence is the order above: a flag beats the environment, which beats the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

EngineKind = Literal["auto", "openai", "llamacpp", "vllm", "sglang", "ollama", "lmstudio", "generic"]
ReasoningMode = Literal["separate", "inline", "none"]
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


def _check_format(value: str | None) -> str | None:
    """A parser setting: a registered format, `auto`, `template` (the parser derived from
    the chat template: docs/parsing.md, Templates no format knows: the derived parser), `none` (read as off) or unset."""
    if value is None or value == "none":
        return None
    if value not in ("auto", "template"):
        from .parsing import get_parser  # loads the formats only when a parser is configured

        get_parser(value)  # ValueError lists the known formats
    return value


class ModelParsing(BaseModel):
    """Parsing options of one model of an upstream (`parsers` table); unset keys inherit."""

    model_config = ConfigDict(extra="forbid")

    parser: str | None = None
    """A format name, `auto`, or `none` to turn parsing off for this model."""
    thinking_open: bool | None = None
    reasoning_mode: ReasoningMode | None = None

    @field_validator("parser")
    @classmethod
    def _parser(cls, value: str | None) -> str | None:
        return value if value == "none" else _check_format(value)


class UpstreamConfig(BaseModel):
    """One OpenAI-compatible chat engine and the options its dialect needs."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    """Shown in `/v1/models` (`owned_by`) and logs; derived from the URL when empty."""
    base_url: str
    """The engine's OpenAI base URL, e.g. `http://127.0.0.1:8080/v1`."""
    api_key: str | None = None
    kind: EngineKind = "auto"
    """The engine's dialect; `auto` recognises it from its `/models` answer or its URL."""
    models: list[str] = Field(default_factory=list)
    """Models served here; empty means ask the engine's `/models`."""
    pool: str | None = None
    """Upstreams with the same `pool` share the requests for the models they serve, with
    failover between them; without it, upstreams serving the same model form its pool.
    A member that cannot be reached is taken to serve what the rest of its pool serves."""
    merge_system: bool | None = None
    """Merge system and developer text into one leading system message (default: yes, except OpenAI)."""
    reasoning_effort_param: Literal["reasoning_effort", "chat_template_kwargs", "both", "none"] | None = None
    """How `reasoning.effort` is passed on (default by kind)."""
    reasoning_history_field: Literal["reasoning_content", "reasoning", "none"] | None = None
    """The assistant-message field that carries earlier reasoning back (default by kind)."""
    reasoning_efforts: list[Effort] | dict[str, list[Effort]] | None = None
    """The reasoning efforts the models here accept: one list for all of them, or a table by model
    name; a level asked for outside it is sent as the nearest inside it. Unset: by kind (OpenAI's
    `none` … `xhigh`, Ollama's `none`, `low`, `medium`, `high`), else `low`, `medium`, `high`
    (docs/engines.md, Reasoning effort)."""
    thinking_budget_param: Literal["thinking_token_budget", "reasoning_budget_tokens", "none"] | None = None
    """The field a thinking budget is passed in (default by kind: vLLM `thinking_token_budget`,
    llama.cpp `reasoning_budget_tokens`, no other kind); `none` sends none."""
    parser: str | None = None
    """Parse raw model text in `content` (engines that do not parse): a format name, or
    `auto` to detect it from the model name; unset or `none`: off."""
    thinking_open: bool = False
    """The chat template opens the reasoning block itself (the output starts inside it)."""
    reasoning_mode: ReasoningMode = "separate"
    """How reasoning reaches clients: `separate`, `inline` (`<think>` in the text), `none`."""
    parsers: dict[str, ModelParsing] = Field(default_factory=dict)
    """Per model name: a format name, `auto` or `none`, or a table of `parser`,
    `thinking_open` and `reasoning_mode`; overrides the settings above for that model."""
    vision: bool | dict[str, bool] | None = None
    """Whether the models here read images: `true` or `false` for all of them, or a table by model
    name. Unset: asked of engines that tell (llama.cpp's `/props`, Ollama, LM Studio), else
    learned from the first refusal of an image (docs/attachments.md)."""
    fetches_image_urls: bool | None = None
    """Whether the engine fetches an image given by http(s) URL itself; when not, ResponseKit
    fetches it (under the URL policy) and sends it inline (default by kind: docs/attachments.md)."""
    context_window: PositiveInt | dict[str, PositiveInt] | None = None
    """Tokens each model here holds, prompt and answer: one number for all of them, or a table by
    model name. Unset: what the engine tells (docs/engines.md, Context windows), else unknown."""
    headers: dict[str, str] = Field(default_factory=dict)
    api: Literal["chat", "completions"] = "chat"
    """`completions`: a raw `/completions` engine; ResponseKit renders the chat template and parses."""
    chat_template: Path | None = None
    """For `api = "completions"`: a Jinja file, a `tokenizer_config.json` or a GGUF model
    (default: the engine's own template, from llama.cpp's `/props`)."""
    grammar_param: Literal["grammar", "structured_outputs", "guided_grammar", "ebnf", "none"] | None = None
    """For `api = "completions"`: how a GBNF grammar is passed (default by kind)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """For `api = "completions"`: fields added to every request (engine options such as `repeat_penalty`)."""
    timeout: float = 600.0
    """Seconds to wait for the engine's next chunk before failing the response."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Generations sent to this engine at once; more wait in a queue per key, served in turn
    across keys (`backends/fairness.py`). Unset: no bound."""
    connect_timeout: float = 10.0

    @field_validator("parser")
    @classmethod
    def _parser(cls, value: str | None) -> str | None:
        return _check_format(value)

    @field_validator("parsers", mode="before")
    @classmethod
    def _parsers(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                model: {"parser": option} if isinstance(option, str) else option
                for model, option in value.items()
            }
        return value

    def reads_images(self, model: str) -> bool | None:
        """What `vision` says of `model` (None: nothing)."""
        if isinstance(self.vision, dict):
            return self.vision.get(model)
        return self.vision

    def efforts(self, model: str) -> list[Effort] | None:
        """What `reasoning_efforts` says of `model` (None: nothing)."""
        if isinstance(self.reasoning_efforts, dict):
            return self.reasoning_efforts.get(model)
        return self.reasoning_efforts

    def window(self, model: str) -> int | None:
        """What `context_window` says of `model` (None: nothing)."""
        if isinstance(self.context_window, dict):
            return self.context_window.get(model)
        return self.context_window

    def parsing(self, model: str) -> ModelParsing:
        """The parsing options for `model`: its `parsers` entry over the upstream's.

        `parser` is None when the model's output is not parsed; `auto` is left to the
        caller, which knows which formats exist.
        """
        own = self.parsers.get(model, ModelParsing())
        parser = own.parser if "parser" in own.model_fields_set else self.parser
        return ModelParsing(
            parser=None if parser == "none" else parser,
            thinking_open=self.thinking_open if own.thinking_open is None else own.thinking_open,
            reasoning_mode=own.reasoning_mode or self.reasoning_mode,
        )

    @model_validator(mode="after")
    def _fill_name(self) -> UpstreamConfig:
        self.base_url = self.base_url.rstrip("/")
        if not self.name:
            parts = urlsplit(self.base_url)
            self.name = parts.netloc or self.base_url
        return self


class LimitsConfig(BaseModel):
    """Limits per key (`default_limits`, and each stored key's own); unset: no limit of that kind."""

    model_config = ConfigDict(extra="forbid")

    rpm: int | None = Field(default=None, ge=1)
    """Requests per minute."""
    tpm: int | None = Field(default=None, ge=1)
    """Tokens (input and output) per minute."""
    max_concurrent: int | None = Field(default=None, ge=1)
    """Requests at once."""
    daily_tokens: int | None = Field(default=None, ge=1)
    """Tokens per UTC day."""
    monthly_tokens: int | None = Field(default=None, ge=1)
    """Tokens per UTC month."""


class SandboxLimits(BaseModel):
    """What each container may use (`sandbox_limits`); its own `memory_limit` sets the memory. The
    defaults are `Limits`' in containers/runtime.py (config imports none of the layers)."""

    model_config = ConfigDict(extra="forbid")

    processes: int = Field(default=256, ge=8)
    """Processes and threads at once, per container."""
    disk_bytes: int = Field(default=1 << 30, ge=1)
    """What the workspace may hold."""
    cpu_seconds: int = Field(default=60, ge=1)
    """CPU time of each process a command starts."""
    wall_seconds: float = Field(default=30.0, gt=0, le=600)
    """Wall-clock time of each call (a command, a cell of code)."""
    output_bytes: int = Field(default=64 * 1024, ge=1024)
    """Of each stream a call returns; past it the text is cut and says so."""


class LocalModel(BaseModel):
    """A GGUF model run in-process by llama.cpp (the `llama` extra)."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    """The name clients use; default: the file name without `.gguf`."""
    path: Path | None = None
    hf_repo: str | None = None
    """With `hf_file`: download the file from this Hugging Face repository (into its cache)."""
    hf_file: str | None = None
    chat_template: Path | None = None
    """A Jinja file or `tokenizer_config.json` overriding the template in the GGUF."""
    parser: str | None = None
    """The output format; default: detected from the chat template."""
    reasoning_mode: ReasoningMode = "separate"
    context: int = Field(default=4096, gt=0)
    """Context window in tokens (shared by prompt and output)."""
    threads: int | None = None
    gpu_layers: int = 0
    parallel: int = Field(default=1, ge=1)
    """Sequences generated at once (each its own context); more requests wait in turn."""
    max_queue: int = Field(default=64, ge=0)
    """Requests that may wait for a sequence; beyond, 429."""
    max_output_tokens: int | None = Field(default=None, gt=0)
    """The longest answer when a request sets no `max_output_tokens` (default: what the context leaves)."""

    @field_validator("parser")
    @classmethod
    def _parser(cls, value: str | None) -> str | None:
        return _check_format(value)

    @model_validator(mode="after")
    def _source(self) -> LocalModel:
        if (self.path is None) == (self.hf_repo is None):
            raise ValueError("a model needs either `path` or `hf_repo` (with `hf_file`)")
        if self.hf_repo is not None and not self.hf_file:
            raise ValueError("`hf_repo` needs `hf_file`, the GGUF file to download")
        if not self.name:
            self.name = Path(self.hf_file or str(self.path)).name.removesuffix(".gguf")
        return self


def parse_upstream(value: str) -> UpstreamConfig:
    """`URL` or `NAME=URL`, the shorthand of `--upstream` and `RESPONSEKIT_UPSTREAMS`."""
    name, sep, url = value.partition("=")
    if sep and "://" not in name:
        return UpstreamConfig(name=name.strip(), base_url=url.strip())
    return UpstreamConfig(base_url=value.strip())


def parse_pairs(value: str) -> dict[str, str]:
    """`a=b,c=d`, the shorthand of `--alias` and `RESPONSEKIT_ALIASES`."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        key, sep, target = item.partition("=")
        if not sep or not key.strip() or not target.strip():
            raise ValueError(f"expected NAME=TARGET, got {item!r}")
        pairs[key.strip()] = target.strip()
    return pairs


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "responsekit"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RESPONSEKIT_", extra="forbid")

    host: str | None = None
    """Address to listen on; 127.0.0.1 unless API keys are configured (then all interfaces)."""
    port: int = 8400
    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str | None = None
    """`postgresql://…` for several replicas; default: SQLite in the data directory."""
    api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Accepted API keys (plain, or `sha256:<hex>` of the key); each owns what it creates."""
    admin_api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Keys (plain, or `sha256:<hex>`) for the admin API (`/admin/v1/api-keys`) and the usage report."""
    record_usage: bool = True
    """Record every generation for the usage report (`/v1/organization/usage/completions`)."""
    queue_timeout: float = Field(default=30.0, gt=0)
    """Seconds a request may wait for a busy engine (`max_concurrency`) before a 429 (529 on Messages)."""
    max_queue_per_key: int = Field(default=64, ge=0)
    """Requests of one key that may wait for a busy engine; beyond, refused at once."""
    keep_place_seconds: float = Field(default=10.0, ge=0)
    """A key that generated within this many seconds and holds no place at a busy engine has one
    place kept free for it, so its next request starts at once; 0: places go strictly in turn."""
    default_limits: LimitsConfig = Field(default_factory=LimitsConfig)
    """Limits for every key that does not set its own (configured keys, and the one anonymous owner
    without keys): `rpm`, `tpm`, `max_concurrent`, `daily_tokens`, `monthly_tokens`."""
    sealing_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Keys sealing reasoning and compaction blobs, newest first (default: the data dir's key file)."""
    summarizer_model: str | None = None
    """A model that writes reasoning summaries when a request asks for `reasoning.summary`."""
    vision_model: str | None = None
    """A served model that reads images and describes them for models that read text only (each
    image once: the description is kept by the image's hash); unset, they are told an image was
    attached that they cannot see (docs/attachments.md)."""
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Hosts or networks (CIDR) that requests may make the server fetch although they are private."""
    max_image_bytes: int = Field(default=20 * 2**20, gt=0)
    """A larger image is given to no model: a note says it was attached (docs/attachments.md)."""
    max_document_chars: int = Field(default=200_000, gt=0)
    """A document's text (`input_file`) beyond this many characters is cut, with a note saying so."""
    max_body_bytes: int = 64 * 2**20
    """Larger request bodies are refused with 413."""
    max_json_depth: int = 100
    """Request bodies nesting deeper are refused with 400."""
    max_input_items: int = 100_000
    """Requests with more input items are refused with 400."""
    lease_seconds: float = 15.0
    """A background response whose process dies is marked failed within this long by another replica
    (or by the restarted process as it starts); a process stalled for less than half of it keeps its runs
    (`runs.py`)."""
    upstreams: Annotated[list[UpstreamConfig], NoDecode] = Field(default_factory=list)
    models: Annotated[list[LocalModel], NoDecode] = Field(default_factory=list)
    """GGUF models run in-process (`--model`, `--hf-repo`/`--hf-file`, or `[[models]]` tables)."""
    probe: bool = True
    """With no upstream configured, look for engines on their usual local ports."""
    aliases: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """Model names clients may use for an upstream model, e.g. `gpt-5-codex = "qwen3-coder"`."""
    default_model: str | None = None
    """Serve names no upstream knows with this model instead of answering 404."""
    balance: Literal["affinity", "least_loaded", "round_robin"] = "affinity"
    """How a pool picks the member for a request: `affinity` (the member that holds the
    request's prompt prefix or key, within bounded load), `least_loaded`, `round_robin`."""
    default_model_fallback: bool = True
    """With no engine configured and none found by probing, serve the embedded Gemma 3 270M
    in-process (the `llama` extra); `--no-default-model` turns it off."""
    strip_billing_header: bool = True
    """Leave Claude Code's `x-anthropic-billing-header: …` line, which changes on every request,
    out of the system prompt sent to the engine, so its prefix cache holds."""
    metrics: bool = True
    """Serve Prometheus metrics at `GET /metrics`; `--no-metrics` turns them off."""
    record_dir: Path | None = None
    """Write every upstream exchange to a JSON file here, for replay in tests."""
    shutdown_timeout: float = 30.0
    """On SIGTERM, seconds to let in-flight streams finish."""
    log_level: str = "info"
    log_format: Literal["text", "json"] = "text"
    """`json`: one JSON object per log line (level, time, request id, route, model, status,
    duration), for log collectors."""
    max_file_bytes: int = Field(default=512 * 1024 * 1024, gt=0)
    """The largest upload `/v1/files` accepts (OpenAI's limit is 512 MB)."""
    files_dir: Path | None = None
    """Where uploaded files are kept: default the data dir's `files/` on SQLite, large objects on PostgreSQL."""
    embedding_url: str | None = None
    """An OpenAI-compatible base URL whose `/embeddings` embeds chunks; default: the bundled all-MiniLM-L6-v2."""
    embedding_model: str = "all-MiniLM-L6-v2"
    """The model asked of `embedding_url` (a vector store's chunks and queries must use one model)."""
    embedding_api_key: str | None = None
    """Sent as `Authorization: Bearer …` to `embedding_url`."""
    web_search_provider: Literal["searxng", "brave", "tavily", "exa"] | None = None
    """The search engine the hosted `web_search` tools use (docs/web-search.md); unset: they are dropped."""
    web_search_url: str | None = None
    """The engine's base URL (required for SearXNG; default: the vendor's API for the others)."""
    web_search_api_key: str | None = None
    """The key of Brave, Tavily or Exa (SearXNG needs none)."""
    web_search_max_results: int = Field(default=5, ge=1, le=20)
    """Results of one search the model reads at `search_context_size: medium` (half at low, twice at high)."""
    sandbox: Literal["bubblewrap", "off"] = "bubblewrap"
    """What runs containers (the code tools, `/v1/containers`): bubblewrap on this machine (or the
    OpenSandbox service at `sandbox_url`, when set), or `off`, which refuses them with
    `sandbox_unavailable` as a machine without bubblewrap does (docs/code-execution.md)."""
    sandbox_limits: SandboxLimits = Field(default_factory=SandboxLimits)
    """`processes`, `disk_bytes`, `cpu_seconds`, `wall_seconds`, `output_bytes` of every container."""
    sandbox_url: str | None = None
    """An OpenSandbox server (`http://host:8080`): set, containers run there instead of on this
    machine (docs/code-execution.md, A remote sandbox)."""
    sandbox_api_key: str | None = None
    """Sent as `OPEN-SANDBOX-API-KEY` to `sandbox_url`."""
    sandbox_image: str = "opensandbox/code-interpreter:v1.1.0"
    """The image each OpenSandbox sandbox runs: OpenSandbox's code-interpreter image or one built on it."""

    @field_validator("upstreams", mode="before")
    @classmethod
    def _upstreams(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [parse_upstream(part) for part in text.split(",") if part.strip()]
        if isinstance(value, list):
            return [parse_upstream(item) if isinstance(item, str) else item for item in value]
        return value

    @field_validator("models", mode="before")
    @classmethod
    def _models(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [{"path": part.strip()} for part in text.split(",") if part.strip()]
        return value

    @field_validator("api_keys", "admin_api_keys", "sealing_keys", "allowed_hosts", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    @property
    def listen_host(self) -> str:
        return self.host or ("0.0.0.0" if self.api_keys or self.admin_api_keys else "127.0.0.1")

    @property
    def database(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'responsekit.db'}"

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text.startswith("{") else parse_pairs(text)
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


def load_settings(config_file: Path | None = None, **flags: Any) -> Settings:
    """Settings from flags (None = not given), the environment and the TOML file.

    The file is `config_file`, else `$RESPONSEKIT_CONFIG`, else none.
    """
    path = config_file or os.environ.get("RESPONSEKIT_CONFIG")
    cls: type[Settings] = Settings
    if path:
        if not Path(path).is_file():
            raise FileNotFoundError(f"config file not found: {path}")
        cls = type("Settings", (Settings,), {"model_config": {**Settings.model_config, "toml_file": path}})
    return cls(**{key: value for key, value in flags.items() if value is not None})
