"""The embedded default model: with no engine configured or found, a fresh server
serves the real Gemma 3 270M in-process, says so, and answers; `--no-default-model` and its
environment and TOML forms turn that off."""

from __future__ import annotations

from pathlib import Path

import httpx

from responsekit.app import create_app
from responsekit.backends.default_model import DEFAULT_MODEL_NAME
from responsekit.config import Settings, load_settings

from .harness import check_response, check_stream, output, read_sse, serve, start_cli


def test_a_fresh_server_serves_the_default_model(tmp_path: Path) -> None:
    # Nothing configured, nothing on the usual ports, an empty data directory: the file is
    # assembled into it from the package, loaded, listed and explained.
    settings = Settings(probe=True, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'state.db'}")
    with serve(create_app(settings)) as url:
        assert (tmp_path / "models" / "gemma-3-270m-q4_k_m.gguf").is_file()
        assert not list((tmp_path / "models").glob("*.partial"))
        models = httpx.get(f"{url}/v1/models").json()["data"]
        assert [model["id"] for model in models] == [DEFAULT_MODEL_NAME]
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "ok"
        fallback = health["default_model"]
        assert fallback["model"] == DEFAULT_MODEL_NAME
        assert "no engine is configured and none was found" in fallback["reason"]
        assert "base model" in fallback["note"] and "not answer quality" in fallback["note"]
        assert "--upstream" in fallback["instead"] and "--hf-repo" in fallback["instead"]
        assert "--no-default-model" in fallback["instead"]
        (engine,) = health["upstreams"]
        assert engine["models"] == [DEFAULT_MODEL_NAME] and engine["reachable"]
        assert engine["chat_template"].startswith("built-in 'gemma'")

        # A newcomer's first requests, to the listed model: both end with text. A base model
        # rarely ends its turn: without max_output_tokens, the answer stops at 256 tokens.
        body = {"model": models[0]["id"], "input": "Write one sentence about the sea."}
        answer = httpx.post(f"{url}/v1/responses", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        response = check_response(answer.json())
        assert response.output_text.strip() and response.usage is not None
        assert response.status == "completed" or response.usage.output_tokens == 256
        body["max_output_tokens"] = 24
        with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}, timeout=120) as streamed:
            events, _ = read_sse(streamed.iter_lines())
        final = check_stream(events)
        assert final["status"] in ("completed", "incomplete")
        assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta").strip()


def test_no_default_model_flag_env_and_toml(tmp_path: Path, monkeypatch) -> None:
    process, url = start_cli("--no-probe", "--no-default-model")
    try:
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "no_upstream" and "default_model" not in health
        assert httpx.get(f"{url}/v1/models").json()["data"] == []
    finally:
        process.terminate()
        process.wait(20)
    assert "Gemma" not in output(process)

    assert Settings().default_model_fallback is True
    monkeypatch.setenv("RESPONSEKIT_DEFAULT_MODEL_FALLBACK", "false")
    assert Settings().default_model_fallback is False
    monkeypatch.delenv("RESPONSEKIT_DEFAULT_MODEL_FALLBACK")
    config = tmp_path / "responsekit.toml"
    config.write_text("default_model_fallback = false\n")
    assert load_settings(config).default_model_fallback is False
