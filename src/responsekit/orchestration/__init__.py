"""A Responses request from start to end, protocol-neutral: history, the loop of server-run tools,
background runs, and what is stored of them (docs/architecture.md, "Orchestration")."""
