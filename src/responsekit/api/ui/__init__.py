"""The inspector at `/ui`: stored responses and conversations as pages, live runs as they happen."""
