"""Reasoning effort as each model accepts it, and the thinking budget an effort stands for.

Clients ask for levels their vendors define (Codex `none` … `max`, Claude Code `low` … `max`);
a chat template or engine accepts only some of them and may refuse the rest. A level a model
does not accept becomes the nearest one it does, so no engine sees a level it would refuse.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal, TypeAlias

Effort: TypeAlias = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]

LEVELS: tuple[Effort, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""Every level a client may ask for, least thinking first."""

DEFAULT_LEVELS: tuple[Effort, ...] = ("low", "medium", "high")
"""What a model accepts when neither its template nor its configuration says more: the
levels gpt-oss's template reads (`Reasoning: low|medium|high`) and most engines pass on."""

BUDGETS: dict[str, int] = {"none": 0, "minimal": 512, "low": 1024, "medium": 4096, "high": 16384,
                           "xhigh": 32768, "max": 65536}  # fmt: skip
"""The thinking tokens an effort stands for, where an engine takes a budget instead."""


def accepted(effort: str, levels: Collection[str]) -> str:
    """The level of `levels` nearest `effort` (the lower on a tie); `effort` itself when accepted
    or not a level at all. `none` becomes the least level when thinking cannot be turned off, and
    no other level becomes `none`: some thinking was asked for."""
    if effort in levels or effort not in LEVELS or not levels:
        return effort
    wanted = LEVELS.index(effort)  # type: ignore[arg-type]
    known = [level for level in LEVELS[1:] if level in levels]
    if not known:
        return effort
    return min(known, key=lambda level: (abs(LEVELS.index(level) - wanted), LEVELS.index(level)))


def budget(effort: str | None, explicit: int | None, output_max: int | None) -> int | None:
    """The thinking budget of a request: the one the client gave, else its effort's; never more
    than the output maximum, as thinking counts against it. None: no budget asked for."""
    tokens = explicit if explicit is not None else BUDGETS.get(effort) if effort is not None else None
    if tokens is None or output_max is None:
        return tokens
    return min(tokens, output_max)
