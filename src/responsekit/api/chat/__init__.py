"""The Chat Completions frontend (`/v1/chat/completions`)."""
