"""OpenAI-style errors: every 4xx/5xx body is `{"error": {message, type, param, code}}`."""

from __future__ import annotations

from typing import Any

from .events import Error


class APIError(Exception):
    """An error a client should see, with the HTTP status and the envelope OpenAI uses."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, code=self.code, param=self.param)


class ContextOverflow(APIError):
    """A prompt the gateway counted past the model's context window before generating: OpenAI's 400
    `context_length_exceeded`, which a frontend that counts its prompt before its stream starts
    (Messages, Gemini) words as its clients act on, as it words an engine's (`event`)."""

    def __init__(self, prompt_tokens: int, window: int) -> None:
        super().__init__(400, overflow_message(prompt_tokens, window), code="context_length_exceeded")
        self.prompt_tokens = prompt_tokens
        self.window = window

    def event(self) -> Error:
        return context_overflow(self.prompt_tokens, self.window)


def context_overflow(prompt_tokens: int, window: int) -> Error:
    """The canonical refusal of a prompt counted past the window, in OpenAI's words."""
    return Error("context_length_exceeded", overflow_message(prompt_tokens, window), 400,
                 prompt_tokens=prompt_tokens, window=window)  # fmt: skip


def overflow_message(prompt_tokens: int, window: int) -> str:
    """OpenAI's words for a prompt past the window (Chat Completions' 400 `context_length_exceeded`),
    which agents' overflow matchers know ("maximum context length")."""
    return (f"This model's maximum context length is {window} tokens. However, your messages resulted in "
            f"{prompt_tokens} tokens. Please reduce the length of the messages.")  # fmt: skip


def error_body(
    message: str, *, type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_type_for_status(status: int) -> str:
    """The `type` OpenAI gives an error of this HTTP status."""
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"
