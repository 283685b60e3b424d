"""The `responsekit` command: serving, and pointing Codex and Claude Code at a running server."""
