"""Regenerate `spec_required.json` from the shared wire checklist (`../shared/spec/spec.json`).

The tests read the JSON this writes, so a fresh clone needs nothing outside the repo.
Run: python tests/data/make_spec_required.py [path/to/spec.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main(source: Path) -> None:
    spec = json.loads(source.read_text())
    openapi = spec["crosscheck_openai_openapi"]
    open_responses = spec["crosscheck_openresponses"]

    events: dict[str, set[str]] = {}
    for member in spec["stream_events"]["members"]:
        events[member["type"]] = set(member["required"])
    for kind, entry in openapi["stream_events"].items():
        events.setdefault(kind, set()).update(entry["required"])
    for kind, entry in open_responses["streaming_events"].items():
        if kind in events:  # Open Responses-only event types are not emitted
            events[kind].update(entry["required"])

    items: dict[str, set[str]] = {}
    for member in spec["output_items"]["members"]:
        items.setdefault(member["type"], set()).update(member["required"])
    for kind, entry in openapi["output_items"].items():
        items.setdefault(kind, set()).update(entry["required"])

    response = (
        set(spec["response_object"]["required"])
        | set(openapi["Response"]["required"])
        | set(open_responses["ResponseResource"]["required"])
    )
    result = {
        "source": f"{source.name}: openai {spec['sdk']['version']}, {openapi['info']['title']} "
        f"{openapi['info']['version']}, {open_responses['info']['title']} {open_responses['info']['version']}",
        "response": sorted(response),
        "usage": sorted(spec["response_usage"]["required"]),
        "events": {kind: sorted(keys) for kind, keys in sorted(events.items())},
        "output_items": {kind: sorted(keys) for kind, keys in sorted(items.items())},
    }
    (HERE / "spec_required.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[2] / "shared/spec/spec.json")
