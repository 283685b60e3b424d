"""A fast OpenAI-compatible engine for benchmarks: streams an N-token answer at once.

Run in its own process so that it does not share a core with what is measured:
`python bench/fake_engine.py --port 9100 --tokens 32`.
"""

from __future__ import annotations

import argparse
import json

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


def build(tokens: int, model: str) -> Starlette:
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

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": model, "object": "model", "owned_by": "bench"}]})

    async def chat(request: Request) -> JSONResponse | StreamingResponse:
        body = await request.json()
        if not body.get("stream"):
            return JSONResponse(completion)

        async def stream():  # type: ignore[no-untyped-def]
            for frame in frames:
                yield frame

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", default="bench-model")
    args = parser.parse_args()
    uvicorn.run(build(args.tokens, args.model), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
