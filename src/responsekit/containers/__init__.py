"""Containers: sandboxes that run code for the code interpreter, the hosted shell and the Messages
API's code execution; the store keeps their records, a runtime executes (docs/code-execution.md)."""
