"""The canonical core every layer speaks: events, the request, ids, errors, JSON and SSE encoding.

Backends and parsers produce its events, frontends render them; it imports nothing above it
(docs/architecture.md, "The canonical core")."""
