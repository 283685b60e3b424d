"""The inspector's screenshots in docs/, from a real server and the scripted engine.

    PYTHONPATH=src python -m tests.ui_screenshots

Writes docs/ui-list.png and docs/ui-response.png with Debian's Chromium (/usr/bin/chromium):
a tool-calling exchange in two turns, other models' answers, a conversation, a failed request and
a background run still going, recorded with `--record`.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import ScriptedUpstream, serve, text_exchange, tool_call_exchange

DOCS = Path(__file__).resolve().parents[1] / "docs"
FORECAST = {"type": "function", "name": "get_forecast", "description": "The weather forecast for a city and day.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
                           "required": ["city", "day"]}}  # fmt: skip


def paced(exchange: dict, first: float = 0.31, each: float = 0.027) -> dict:
    """The exchange as an engine sends it: the first token after `first` seconds, then one every `each`."""
    for position, chunk in enumerate(exchange["chunks"]):
        chunk["t"] = first + position * each
    return exchange


def main() -> None:
    engine = ScriptedUpstream(models=("qwen3-30b-a3b", "gemma-3-12b"))
    engine.time_scale = 1.0
    gate = threading.Event()
    with tempfile.TemporaryDirectory() as data, serve(engine.app) as engine_url:
        settings = Settings(upstreams=[UpstreamConfig(name="vllm", base_url=f"{engine_url}/v1")], probe=False,
                            data_dir=Path(data), record_dir=Path(data) / "recorded")  # fmt: skip
        with serve(create_app(settings)) as url:

            def create(**body: object) -> dict:
                return httpx.post(f"{url}/v1/responses", json=body, timeout=30).json()

            engine.push(paced(text_exchange("A haiku about autumn:\n\nMaple leaves drifting\nacross the quiet river\n"
                                            "the year exhales slow", pieces=6)))  # fmt: skip
            create(model="gemma-3-12b", input="Write a haiku about autumn.")
            engine.push({"status": 503, "error_body": '{"error": {"message": "engine overloaded"}}'})
            create(model="qwen3-30b-a3b", input="Summarize the meeting notes.")
            httpx.post(f"{url}/v1/conversations", json={"metadata": {"project": "trip-planner"}, "items": [
                {"type": "message", "role": "user", "content": "Plan a weekend in Lyon."}]})  # fmt: skip
            engine.push(paced(tool_call_exchange("get_forecast", {"city": "Lyon", "day": "tomorrow"},
                                                 reasoning="The user wants tomorrow's weather in Lyon; I should call "
                                                           "get_forecast.")))  # fmt: skip
            first = create(model="qwen3-30b-a3b", tools=[FORECAST],
                           input="What's the weather in Lyon tomorrow? Should I bring an umbrella?")  # fmt: skip
            call = next(item for item in first["output"] if item["type"] == "function_call")
            engine.push(paced(text_exchange(
                "Tomorrow in Lyon: light rain is likely (70 %) with a high of 14 °C. Yes, take an umbrella, "
                "and a light jacket for the evening.",
                reasoning="The forecast says 70 % rain and 14 °C: an umbrella is worth it.", pieces=8), 0.42))  # fmt: skip
            second = create(model="qwen3-30b-a3b", tools=[FORECAST], previous_response_id=first["id"], input=[
                {"type": "function_call_output", "call_id": call["call_id"],
                 "output": '{"forecast": "light rain", "chance_of_rain": 0.7, "high_c": 14}'}])  # fmt: skip
            slow = text_exchange("Day 1: the old town (Vieux Lyon) and Fourvière…", pieces=6)
            slow["chunks"].insert(4, {"gate": gate})
            engine.push(slow)
            create(model="qwen3-30b-a3b", input="Draft a two-day itinerary for Lyon.", background=True)

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
                page = browser.new_page(viewport={"width": 1280, "height": 640}, device_scale_factor=1)
                page.goto(f"{url}/ui")
                page.screenshot(path=str(DOCS / "ui-list.png"), full_page=True)
                page.set_viewport_size({"width": 1280, "height": 900})
                page.goto(f"{url}/ui/responses/{second['id']}")
                page.evaluate("document.querySelectorAll('section.exchange details[open]').forEach(d => d.open = false)")
                page.screenshot(path=str(DOCS / "ui-response.png"), full_page=True)
                browser.close()
            gate.set()


if __name__ == "__main__":
    main()
