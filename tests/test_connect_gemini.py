"""`responsekit connect gemini`: Gemini CLI's variables and settings, printed or merged into ~/.gemini."""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import Result
from typer.testing import CliRunner

from responsekit.cli.connect_gemini import compression_threshold
from responsekit.cli.main import app

HELPERS = ["gemini-3-flash-preview", "gemini-3-pro-preview", "flash-lite"]


def run(*args: str) -> Result:
    return CliRunner().invoke(app, ["connect", "gemini", *args])


def connect(*args: str) -> tuple[int, str]:
    done = run(*args)
    return done.exit_code, done.output


def parse(printed: str) -> tuple[dict[str, str], dict]:
    """The `export` lines and the settings.json fragment after the comment line."""
    lines = printed.splitlines()
    exports = dict(shlex.split(line)[1].split("=", 1) for line in lines if line.startswith("export "))
    comment = next(i for i, line in enumerate(lines) if line.startswith("#"))
    assert lines[comment] == "# and in ~/.gemini/settings.json (merged with what is there):"
    return exports, json.loads("\n".join(lines[comment + 1:]))


def test_prints_the_env_and_settings_for_the_first_served_model(server):
    """The server does not know the model's window: Gemini CLI is not told one, and the user is."""
    done = run("--url", server.url)
    assert done.exit_code == 0, done.output
    assert "does not know the context window of test-model: Gemini CLI is not told when to compress" in done.stderr
    exports, settings = parse(done.stdout)
    assert exports == {"GOOGLE_GEMINI_BASE_URL": server.url, "GEMINI_API_KEY": "unused", "GEMINI_MODEL": "test-model"}
    assert settings == {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "modelConfigs": {"customOverrides": [{"match": {"model": helper}, "modelConfig": {"model": "test-model"}}
                                             for helper in HELPERS]},
    }  # fmt: skip


def test_a_v1_url_becomes_the_root_the_sdk_appends_v1beta_to(server):
    for url in (f"{server.url}/v1/", f"{server.url}/v1beta"):
        code, printed = connect("--url", url, "--model", "big", "--api-key", "k 1")
        assert code == 0, printed
        exports, settings = parse(printed)
        assert exports == {"GOOGLE_GEMINI_BASE_URL": server.url, "GEMINI_API_KEY": "k 1", "GEMINI_MODEL": "big"}
        assert {o["modelConfig"]["model"] for o in settings["modelConfigs"]["customOverrides"]} == {"big"}


def test_write_merges_settings_and_env_keeping_the_rest(windowed_server, tmp_path):
    server = windowed_server
    directory = tmp_path / ".gemini"
    directory.mkdir()
    theirs = {"model": {"name": "gemini-2.5-pro", "maxSessionTurns": 20}, "ui": {"theme": "Dracula"},
              "security": {"auth": {"selectedType": "oauth-personal", "useExternal": False}, "folderTrust": {"enabled": True}},
              "modelConfigs": {"customOverrides": [{"match": {"model": "chat-base"}, "modelConfig": {"generateContentConfig": {"temperature": 0.2}}},
                                                   {"match": {"model": "flash-lite"}, "modelConfig": {"model": "old"}}]}}  # fmt: skip
    (directory / "settings.json").write_text(json.dumps(theirs))
    (directory / ".env").write_text("# mine\nDEBUG=1\nexport GEMINI_API_KEY=real-google-key\nGEMINI_MODEL='old'\n")
    for _ in range(2):  # a second run changes nothing
        code, printed = connect("--url", server.url, "--api-key", "test", "--gemini-dir", str(directory), "--write")
        assert code == 0, printed
        assert printed.strip() == f"wrote {directory / 'settings.json'} and {directory / '.env'}"
    settings = json.loads((directory / "settings.json").read_text())
    assert settings["ui"] == {"theme": "Dracula"}
    # Gemini CLI compresses once the prompt reaches this share of the million tokens it assumes:
    # the window (32,768) less a quarter, 24,576 of 1,048,576.
    assert settings["model"] == {**theirs["model"], "compressionThreshold": 0.023437}
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key", "useExternal": False},
                                    "folderTrust": {"enabled": True}}  # fmt: skip
    assert settings["privacy"] == {"usageStatisticsEnabled": False}
    overrides = settings["modelConfigs"]["customOverrides"]
    assert overrides[0] == theirs["modelConfigs"]["customOverrides"][0], "an override of another model is kept"
    assert [o["match"]["model"] for o in overrides[1:]] == HELPERS
    assert all(o["modelConfig"] == {"model": "test-model"} for o in overrides[1:])
    assert (directory / ".env").read_text() == (
        f"# mine\nDEBUG=1\nGEMINI_API_KEY=test\nGEMINI_MODEL=test-model\nGOOGLE_GEMINI_BASE_URL={server.url}\n"
    )


def test_write_makes_the_directory_and_files_under_gemini_cli_home(server, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "home"))  # Gemini CLI's own stand-in for the home
    code, printed = connect("--url", server.url, "--model", "a model", "--write")
    assert code == 0, printed
    directory = tmp_path / "home" / ".gemini"
    assert json.loads((directory / "settings.json").read_text())["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert (directory / ".env").stat().st_mode & 0o777 == 0o600, "it holds the key"
    env = (directory / ".env").read_text()
    assert env == f'GOOGLE_GEMINI_BASE_URL={server.url}\nGEMINI_API_KEY=unused\nGEMINI_MODEL="a model"\n'


def test_a_settings_file_it_cannot_merge_is_left_alone(server, tmp_path):
    for text, said in (("[1, 2]", "does not hold a JSON object"), ('{"security": []}', '"security" of settings.json'),
                       ('{"modelConfigs": {"customOverrides": {}}}', '"modelConfigs.customOverrides"'),
                       ('{// a comment\n"ui": {}}', "settings.json")):  # fmt: skip
        (tmp_path / "settings.json").write_text(text)
        code, printed = connect("--url", server.url, "--gemini-dir", str(tmp_path), "--write")
        assert code == 2 and said in " ".join(printed.split()), printed
        assert (tmp_path / "settings.json").read_text() == text
        assert not (tmp_path / ".env").exists()


def test_an_unreachable_server_is_a_usage_error(unused_port):
    code, printed = connect("--url", f"http://127.0.0.1:{unused_port}")
    assert code == 2 and "cannot list the models" in printed


@pytest.mark.parametrize(("model", "window", "threshold"), [
    ("qwen3", 32768, 0.023437),  # 24,576 of 1,048,576, rounded down
    ("qwen3", 131072, 0.094482),
    ("qwen3", 4_000_000, 0.969482),  # Gemini CLI sends nothing past the million it assumes
    ("gemma-4-31b-it", 131072, 0.387),  # it assumes 256,000 for this one
])  # fmt: skip
def test_the_threshold_is_the_compaction_point_of_the_window_gemini_cli_assumes(model, window, threshold):
    assert compression_threshold(model, window) == threshold
