"""Report which corpus formats have no parser yet, at the end of every run."""

from __future__ import annotations

from typing import Any

from responsekit.parsing import available_formats

from .parsing_support import load_cases


def pytest_terminal_summary(terminalreporter: Any) -> None:
    cases = load_cases()
    registered = set(available_formats())
    pending = sorted({c["format"] for c in cases} - registered)
    runnable = sum(c["format"] in registered for c in cases)
    terminalreporter.write_sep("-", "parser corpus coverage")
    terminalreporter.write_line(
        f"{runnable}/{len(cases)} corpus cases run against {len(registered)} registered formats"
    )
    if pending:
        terminalreporter.write_line(
            f"formats without a parser ({len(pending)}): {', '.join(pending)}"
        )
