"""`Timeline`: a response's events as a few entries, deltas on one item folded into one."""

from __future__ import annotations

from responsekit.orchestration.timeline import Timeline


def test_deltas_on_one_item_are_one_entry_and_the_first_is_the_first_token():
    timeline = Timeline()
    response = {"id": "resp_1", "status": "in_progress"}
    message = {"type": "message", "id": "msg_1", "status": "in_progress"}
    events = [
        {"type": "response.created", "sequence_number": 0, "response": response},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": message},
        *({"type": "response.output_text.delta", "sequence_number": n, "output_index": 0, "delta": "x"}
          for n in range(2, 12)),
        {"type": "response.output_item.done", "sequence_number": 12, "output_index": 0, "item": message},
        {"type": "response.function_call_arguments.delta", "sequence_number": 13, "output_index": 1, "delta": "{"},
        {"type": "response.completed", "sequence_number": 14, "response": {**response, "status": "completed"}},
    ]  # fmt: skip
    for event in events:
        timeline.saw(event)
    record = timeline.record()
    kinds = [(entry["type"], entry.get("count")) for entry in record["entries"]]
    assert kinds == [
        ("response.created", None), ("response.output_item.added", None), ("response.output_text.delta", 10),
        ("response.output_item.done", None), ("response.function_call_arguments.delta", 1),
        ("response.completed", None),
    ]  # fmt: skip
    text_run = record["entries"][2]
    assert record["time_to_first_token"] == text_run["t"] <= text_run["until"] <= record["duration"]
    assert record["entries"][1]["item"] == {"type": "message", "id": "msg_1", "status": "in_progress"}
    assert record["entries"][-1]["status"] == "completed"


def test_a_response_without_output_has_no_first_token():
    timeline = Timeline()
    timeline.saw({"type": "response.created", "sequence_number": 0, "response": {"status": "in_progress"}})
    timeline.saw({"type": "response.failed", "sequence_number": 1, "response": {"status": "failed"}})
    record = timeline.record()
    assert record["time_to_first_token"] is None and record["duration"] is not None
