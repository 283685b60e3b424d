"""A fast OpenAI-compatible engine for benchmarks: streams an N-token answer at once.

Run in its own process so that it does not share a core with what is measured:
`python bench/fake_engine.py --port 9100 --tokens 32`.

With `--token-interval S`, each token takes S seconds, streamed or not (a non-streamed
answer comes once all its tokens would have been generated), as a real engine's do;
without it, answers cost nothing but their HTTP, and what a gateway adds is all there is.

It serves two models: MODEL streams its whole answer at once; MODEL-hold sends the
first token and then holds the stream open (for measuring what an open stream costs a
gateway) until the client goes away or `--hold-seconds` pass.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


def build(tokens: int, model: str, hold_seconds: float = 600.0, interval: float = 0.0, slots: int = 0) -> Starlette:
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": model}

    def chunk(delta: dict, finish: str | None = None, **extra: object) -> bytes:
        body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(body)}\n\n".encode()

    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": f" word{n}"}) for n in range(tokens)]
    usage = {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": 20 + tokens}
    frames += [chunk({}, "stop", usage=usage), b"data: [DONE]\n\n"]
    completion = {
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(f" word{n}" for n in range(tokens))},
                     "finish_reason": "stop"}],
        "usage": usage,
    }  # fmt: skip
    held = f"{model}-hold"

    turns = asyncio.Semaphore(slots) if slots else None
    """With `slots`, a streamed answer waits for one (first come, first served), as llama.cpp's
    requests wait for a free slot."""

    def loop_time() -> float:
        return asyncio.get_running_loop().time()

    async def models(request: Request) -> JSONResponse:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "bench"} for name in (model, held)]
        return JSONResponse({"object": "list", "data": data})

    async def chat(request: Request) -> JSONResponse | StreamingResponse:
        body = await request.json()
        if not body.get("stream"):
            if interval:
                await asyncio.sleep(interval * tokens)
            return JSONResponse(completion)
        hold = body.get("model") == held

        async def stream():  # type: ignore[no-untyped-def]
            if turns is not None:
                async with turns:
                    async for frame in answer():
                        yield frame
                return
            async for frame in answer():
                yield frame

        async def answer():  # type: ignore[no-untyped-def]
            start = loop_time()
            for position, frame in enumerate(frames):
                if interval and 1 <= position <= tokens:
                    # Token n is due n intervals after the start: the event loop's timers are
                    # coarser than an interval, but the answer takes exactly its time.
                    await asyncio.sleep(max(0.0, start + position * interval - loop_time()))
                yield frame
                if hold and position == 1:
                    await asyncio.sleep(hold_seconds)

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", default="bench-model")
    parser.add_argument("--hold-seconds", type=float, default=600.0)
    parser.add_argument("--token-interval", type=float, default=0.0, help="seconds each token takes (default: none)")
    parser.add_argument("--slots", type=int, default=0, help="streams generated at once; more wait in turn (default: no bound)")
    args = parser.parse_args()
    app = build(args.tokens, args.model, args.hold_seconds, args.token_interval, args.slots)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False, backlog=4096)


if __name__ == "__main__":
    main()
