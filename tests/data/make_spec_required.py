"""Regenerate `spec_required.json`, the keys every Responses object and event must carry.

The tests read the JSON this writes, so a fresh clone needs nothing outside the repository;
this script is needed only to refresh it when the API moves.

Its input is a wire checklist of OpenAI's Responses API (`spec.json`): for each stream event
type, output item type, the `Response` object and its usage, the keys that are required. The
checklist was written from three public sources, whose versions `spec_required.json` records
under `source`:

* the `openai` Python SDK's pydantic types (`openai.types.responses`; PyPI `openai`): a
  field without a default is required (`stream_events`, `output_items`, `response_object`,
  `response_usage`, `sdk.version`);
* OpenAI's OpenAPI document, https://github.com/openai/openai-openapi, which also requires
  the keys the SDK shows as `Optional[...] = None` (`crosscheck_openai_openapi`: `info`,
  `Response`, `stream_events`, `output_items`, each with `required`);
* the Open Responses specification, https://github.com/openresponses/openresponses
  (`crosscheck_openresponses`: `info`, `ResponseResource`, `streaming_events`).

The checklist is not published as such: to refresh the keys, write a JSON of that shape from
newer versions of those sources (the keys read below), then run
    python tests/data/make_spec_required.py path/to/spec.json
"""

from __future__ import annotations

import argparse
import json
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("spec", type=Path, help="the wire checklist (spec.json) described in this script's docstring")
    main(parser.parse_args().spec)
