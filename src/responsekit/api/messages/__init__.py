"""The Anthropic Messages frontend (`/v1/messages`), rendered from the canonical event stream."""
