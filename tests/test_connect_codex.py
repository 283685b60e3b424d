"""`responsekit connect codex`: Codex's provider entry and a catalog of every served model, with or
without a `codex` to clone an entry from, checked by the real Codex (`codex debug models` reads the
catalog as a session does, and refuses a bad one; `codex exec` compacts at the catalog's limit)."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from responsekit.cli.connect_codex import BASE_ENTRY, entry
from responsekit.cli.main import app
from responsekit.cli.served import ServedModel

from .conftest import WINDOW
from .test_real_clients import CODEX, SUMMARY, codex_home, compacting_engine, run_codex


def connect(*args: str) -> Result:
    return CliRunner().invoke(app, ["connect", "codex", *args])


def written(home: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """config.toml and the catalog it names."""
    config = tomllib.loads((home / "config.toml").read_text())
    return config, json.loads(Path(config["model_catalog_json"]).read_text())


def codex_models(home: Path) -> dict[str, dict[str, Any]]:
    """The catalog as the real Codex reads it with this home's config.toml, by slug."""
    done = subprocess.run([str(CODEX), "debug", "models"], env={**os.environ, "CODEX_HOME": str(home), "RUST_BACKTRACE": "0"},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return {model["slug"]: model for model in json.loads(done.stdout)["models"]}


def connect_without_codex(monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    with monkeypatch.context() as patch:
        patch.setenv("PATH", "/nonexistent")  # no `codex` to ask
        return connect(*args)


def test_without_codex_every_model_gets_an_entry_codex_accepts(windowed_server, tmp_path, monkeypatch):
    home = tmp_path / "codex-home"
    done = connect_without_codex(monkeypatch, "--url", windowed_server.base_url, "--codex-home", str(home), "--write")
    assert done.exit_code == 0, done.output
    assert "codex not found: the catalog holds no instructions for Codex to send" in done.stderr
    config, catalog = written(home)
    assert config["model"] == "test-model" and config["model_catalog_json"] == str(home / "responsekit-models.json")
    [model] = catalog["models"]
    assert {key: model[key] for key in BASE_ENTRY} == BASE_ENTRY
    assert model["context_window"] == model["max_context_window"] == WINDOW
    assert model["auto_compact_token_limit"] == WINDOW - WINDOW // 4
    assert [level["effort"] for level in model["supported_reasoning_levels"]] == ["low", "medium", "high"]
    assert model["default_reasoning_level"] == "medium" and model["supports_reasoning_summaries"] is True
    assert model["input_modalities"] == ["text", "image"] and model["supports_search_tool"] is True

    read = codex_models(home)["test-model"]
    assert (read["context_window"], read["auto_compact_token_limit"]) == (WINDOW, WINDOW - WINDOW // 4)
    assert read["input_modalities"] == ["text", "image"] and read["supports_search_tool"] is True
    assert [level["effort"] for level in read["supported_reasoning_levels"]] == ["low", "medium", "high"]


def test_an_unknown_window_is_the_one_given_and_said(server, monkeypatch):
    done = connect_without_codex(monkeypatch, "--url", server.base_url, "--context-window", "65536")
    assert done.exit_code == 0, done.output
    assert "does not know the context window of test-model: the catalog states 65536 tokens" in done.stderr
    printed = done.stdout
    config = tomllib.loads(printed[: printed.index("# and ")])
    catalog = json.loads(printed[printed.index("\n", printed.index("# and ")) :])
    assert config["model_catalog_json"].endswith("responsekit-models.json")
    [model] = catalog["models"]
    assert (model["context_window"], model["auto_compact_token_limit"]) == (65536, 65536 - 16384)


@pytest.mark.parametrize(("window", "limit"), [(8192, 6144), (131072, 99072), (1_048_576, 943_718)])
def test_the_compaction_limit_leaves_a_quarter_and_never_passes_codexs_own_90_percent(window, limit):
    model = entry(ServedModel("m", window, takes_images=False), BASE_ENTRY, 131072, 0)
    assert model["auto_compact_token_limit"] == limit
    assert model["input_modalities"] == ["text"]


def test_with_codex_the_entry_is_cloned_from_its_catalog_and_compacts_at_its_limit(windowed_server, tmp_path):
    """Codex's own instructions come along; `codex exec`, told nothing but the catalog, compacts once
    the engine reports a prompt past the catalog's limit (30,000 tokens of a 32,768 window), which
    the window Codex assumes for a model it does not know would leave far below its threshold."""
    windowed_server.upstream.responder = compacting_engine()
    home, work = codex_home(tmp_path, windowed_server.base_url), tmp_path / "work"
    work.mkdir()
    config, catalog = written(home)
    [model] = catalog["models"]
    assert model["model_messages"]["instructions_template"], "Codex's instructions, cloned"
    assert (model["context_window"], model["auto_compact_token_limit"]) == (WINDOW, WINDOW - WINDOW // 4)
    assert "model_auto_compact_token_limit" not in config
    assert codex_models(home)["test-model"]["auto_compact_token_limit"] == WINDOW - WINDOW // 4

    events = run_codex(home, work, "Run uname and tell me the result")
    answers = [e["item"]["text"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"]
    assert answers[-1] == "Done after compaction: Linux."
    assert any(SUMMARY in json.dumps(body) for body in windowed_server.upstream.requests), "compacted"
