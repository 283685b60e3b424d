"""`responsekit connect claude`: Claude Code's environment, printed or merged into settings.json."""

from __future__ import annotations

import json
import shlex

from typer.testing import CliRunner

from responsekit.cli.main import app


def connect(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(app, ["connect", "claude", *args])
    return done.exit_code, done.output


def test_prints_the_env_for_the_first_served_model(server):
    code, printed = connect("--url", server.url)
    assert code == 0, printed
    assert json.loads(printed) == {"env": {
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_AUTH_TOKEN": "unused",
        "ANTHROPIC_MODEL": "test-model",
        "ANTHROPIC_DEFAULT_OPUS_MODEL": "test-model",
        "ANTHROPIC_DEFAULT_SONNET_MODEL": "test-model",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "test-model",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }, "skipWebFetchPreflight": True}  # fmt: skip


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
    code, printed = connect("--url", server.url, "--claude-home", str(home), "--write")
    assert code == 0, printed
    assert printed.strip() == f"wrote {home / 'settings.json'}"
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
