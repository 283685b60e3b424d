"""`responsekit connect claude`: Claude Code's environment, printed or merged into settings.json."""

from __future__ import annotations

import json
import math
import shlex

import pytest
from click.testing import Result
from typer.testing import CliRunner

from responsekit.app import create_app
from responsekit.cli.connect_claude import compaction_env
from responsekit.cli.main import app
from responsekit.cli.served import compaction_point
from responsekit.config import Settings, UpstreamConfig

from .conftest import WINDOW
from .harness import serve


def run(*args: str) -> Result:
    return CliRunner().invoke(app, ["connect", "claude", *args])


def connect(*args: str) -> tuple[int, str]:
    done = run(*args)
    return done.exit_code, done.output


def test_prints_the_env_for_the_first_served_model(server):
    """The server does not know the model's window: Claude Code is not told one, and the user is."""
    done = run("--url", server.url)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"env": {
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_AUTH_TOKEN": "unused",
        "ANTHROPIC_MODEL": "test-model",
        "ANTHROPIC_DEFAULT_OPUS_MODEL": "test-model",
        "ANTHROPIC_DEFAULT_SONNET_MODEL": "test-model",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "test-model",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ENABLE_TOOL_SEARCH": "true",
    }, "skipWebFetchPreflight": True}  # fmt: skip
    assert "does not know the context window of test-model: Claude Code is not told when to compact" in done.stderr


def claude_code_threshold(env: dict[str, str]) -> int:
    """Where Claude Code 2.1.332 compacts with these variables, for a model it does not know
    (its `gse` and `QG`: the auto-compact window less the output maximum, up to 20,000, then the
    percentage, never above 13,000 below that)."""
    effective = int(env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"]) - min(int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]), 20_000)
    return min(math.floor(effective * float(env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"]) / 100), effective - 13_000)


def test_a_known_window_tells_claude_code_when_to_compact(windowed_server):
    done = run("--url", windowed_server.url)
    assert done.exit_code == 0 and done.stderr == "", done.output
    env = json.loads(done.stdout)["env"]
    assert {name: env[name] for name in compaction_env(WINDOW)} == {
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8192",  # a quarter of the window
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000",  # the least Claude Code takes
        "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "26.76",
    }  # fmt: skip
    assert 24_400 < claude_code_threshold(env) <= compaction_point(WINDOW) == WINDOW - 8192


@pytest.mark.parametrize("window", [8192, 24576, 32768, 65536, 99_999, 131072, 200_000, 1_048_576])
def test_claude_code_compacts_at_the_point_or_a_little_before(window):
    """With room for an answer above it: what the window leaves after the point is the output
    maximum (up to 32,000), and a large window keeps Claude Code's own 13,000 more."""
    env = compaction_env(window)
    threshold, output = claude_code_threshold(env), int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"])
    assert output == min(window // 4, 32_000)
    assert threshold <= compaction_point(window) == window - output
    assert threshold >= min(compaction_point(window) - window // 500, window - min(output, 20_000) - 13_000)


def test_a_v1_url_becomes_the_root_claude_code_appends_v1_messages_to(server):
    code, printed = connect("--url", f"{server.url}/v1/", "--model", "big", "--small-model", "small",
                            "--api-key", "k 1", "--shell")  # fmt: skip
    assert code == 0, printed
    lines = printed.splitlines()
    exports = dict(shlex.split(line)[1].split("=", 1) for line in lines if line.startswith("export "))
    assert lines[-1] == '# and in ~/.claude/settings.json (no variable sets it): "skipWebFetchPreflight": true'
    assert exports["ANTHROPIC_BASE_URL"] == server.url
    assert exports["ANTHROPIC_AUTH_TOKEN"] == "k 1"
    assert exports["ANTHROPIC_MODEL"] == exports["ANTHROPIC_DEFAULT_SONNET_MODEL"] == "big"
    assert exports["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "small"


def test_write_merges_into_settings_json_keeping_the_rest(server, tmp_path):
    home = tmp_path / "claude"
    home.mkdir()
    mine = {"permissions": {"allow": ["Bash(ls:*)"]}, "env": {"MY_VAR": "x", "ANTHROPIC_MODEL": "claude-old"},
            "model": "opus"}  # fmt: skip
    (home / "settings.json").write_text(json.dumps(mine))
    done = run("--url", server.url, "--claude-home", str(home), "--write")
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == f"wrote {home / 'settings.json'}"
    settings = json.loads((home / "settings.json").read_text())
    assert settings["permissions"] == mine["permissions"] and settings["model"] == "opus"
    assert settings["env"]["MY_VAR"] == "x"
    assert settings["env"]["ANTHROPIC_MODEL"] == "test-model"
    assert settings["env"]["ANTHROPIC_BASE_URL"] == server.url


def test_write_makes_the_home_and_file_when_missing(server, tmp_path, monkeypatch):
    home = tmp_path / "fresh" / ".claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home))  # Claude Code's own variable for its home
    code, printed = connect("--url", server.url, "--write")
    assert code == 0, printed
    assert json.loads((home / "settings.json").read_text())["env"]["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "test-model"


def test_a_settings_file_that_is_not_an_object_is_left_alone(server, tmp_path):
    (tmp_path / "settings.json").write_text("[1, 2]")
    code, printed = connect("--url", server.url, "--claude-home", str(tmp_path), "--write")
    assert code == 2 and "does not hold a JSON object" in printed
    (tmp_path / "settings.json").write_text("{broken")
    code, printed = connect("--url", server.url, "--claude-home", str(tmp_path), "--write")
    assert code == 2 and "settings.json" in printed
    assert (tmp_path / "settings.json").read_text() == "{broken"


def test_an_unreachable_server_is_a_usage_error(unused_port):
    code, printed = connect("--url", f"http://127.0.0.1:{unused_port}")
    assert code == 2 and "cannot list the models" in printed


def test_the_smaller_window_of_the_two_models_is_told(tmp_path, upstream, database_url):
    """Claude Code applies the variables to every model: the haiku model's smaller window wins."""
    upstream.models = ["big", "small", "unsized"]
    windows = {"big": 131072, "small": 16384}
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url, context_window=windows)],  # type: ignore[attr-defined]
                        probe=False, data_dir=tmp_path, database_url=database_url)  # fmt: skip
    with serve(create_app(settings)) as url:
        done = run("--url", url, "--model", "big", "--small-model", "small")
        assert json.loads(done.stdout)["env"]["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "4096"
        done = run("--url", url, "--model", "big", "--small-model", "unsized")
        assert json.loads(done.stdout)["env"]["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "32000"
        assert "does not know the context window of unsized: Claude Code is told the other's" in done.stderr
