"""A thinking budget for in-process models: the reasoning ends at its limit.

Engines behind HTTP end it themselves (vLLM's `thinking_token_budget`, llama.cpp's
`reasoning_budget_tokens`); here the generation loop counts the tokens written inside the
reasoning block and, at the budget, writes the template's end-of-reasoning marker in the
model's place, as llama.cpp's reasoning-budget sampler forces its end sequence
(https://github.com/ggml-org/llama.cpp/blob/master/common/reasoning-budget.h). The model then
answers after a closed block.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ThinkingBudget:
    """The budget of one generation; fed each token's text, in order."""

    opener: str
    closer: str
    tokens: int
    inside: bool = False
    """In the reasoning block: the prompt opened it, or the model has written `opener`."""
    over: bool = False
    """The block has been closed (by the model or in its place): nothing more is counted."""
    spent: int = 0
    _recent: str = ""

    def due(self) -> bool:
        """Whether `closer` must be written before the next token."""
        return self.inside and not self.over and self.spent >= self.tokens

    def feed(self, text: str) -> None:
        """One generated token's text."""
        if self.over:
            return
        keep = max(len(self.opener), len(self.closer)) + len(text)
        self._recent = (self._recent + text)[-keep:]
        if not self.inside:
            if self.opener and self.opener in self._recent:
                self.inside = True
                self._recent = self._recent.split(self.opener, 1)[1]
            return
        self.spent += 1
        if self.closer in self._recent:
            self.over = True
