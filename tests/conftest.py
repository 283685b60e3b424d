from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import ScriptedUpstream, serve


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    engine = ScriptedUpstream()
    with serve(engine.app) as url:
        engine.url = f"{url}/v1"  # type: ignore[attr-defined]
        yield engine


@dataclass
class Server:
    url: str
    upstream: ScriptedUpstream

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def client(self, **options: object) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key="test", max_retries=0, **options)  # type: ignore[arg-type]


@pytest.fixture
def settings(upstream: ScriptedUpstream) -> Settings:
    return Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False)  # type: ignore[attr-defined]


@pytest.fixture
def server(upstream: ScriptedUpstream, settings: Settings) -> Iterator[Server]:
    with serve(create_app(settings)) as url:
        yield Server(url, upstream)


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
