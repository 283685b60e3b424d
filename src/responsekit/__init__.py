"""ResponseKit: the OpenAI Responses API for any model."""

__version__ = "0.1.0"
