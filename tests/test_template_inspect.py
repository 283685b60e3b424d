"""`responsekit template inspect FILE` (docs/parsing.md)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from responsekit.cli.main import app

TEMPLATES = Path(__file__).parent / "data" / "formats" / "templates"


def inspect(path: Path) -> str:
    done = CliRunner().invoke(app, ["template", "inspect", str(path)])
    assert done.exit_code == 0, done.output
    return done.output


def test_a_template_no_format_knows_is_described_and_left_to_the_derived_parser() -> None:
    output = inspect(TEMPLATES / "upstage-Solar-Open-100B.jinja")
    assert "reasoning:              '<|think|>' … '<|end|>'" in output
    assert "section:                '<|tool_calls|>' … '<|calls|>'" in output
    assert "call id ends:           '<|tool_call:name|>'" in output
    assert (
        "parser under auto:      template: derived from the chat template, which no hand-written"
        in output
    )


def test_a_tokenizer_config_names_the_hand_written_format_it_matches(tmp_path: Path) -> None:
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": (TEMPLATES / "Qwen3.5-4B.jinja").read_text(),
                                  "eos_token": "<|im_end|>"}))  # fmt: skip
    output = inspect(config)
    assert "prompt opens reasoning: yes" in output
    assert "argument key:           '<parameter=' … '>'" in output
    assert (
        "parser under auto:      qwen3_coder_xml: its markers occur in the chat template" in output
    )


def test_a_gguf_s_template_is_read_from_its_metadata(gemma_gguf: Path) -> None:
    """The Gemma 3 GGUF's template writes calls only as the generic JSON protocol the
    server describes to it (`backends/generic_tools.py`), which it keeps."""
    output = inspect(gemma_gguf)
    assert "end of turn:            '<end_of_turn>', '<eos>'" in output
    assert (
        "parser under auto:      none: the template reads no tools: calls go through the generic"
        in output
    )


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["template", "inspect", str(tmp_path / "nope.jinja")])
    assert done.exit_code == 2
    assert "not found" in done.output
