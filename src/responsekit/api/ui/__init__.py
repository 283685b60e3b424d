"""The inspector at `/ui` (issue 16): stored responses and conversations as pages, live runs as they happen."""
