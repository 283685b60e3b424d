"""Where a request's prompt is cached: rendezvous hashing of affinity keys, and the prompt
prefixes each pool member served recently.

Both are small enough to write here: the trie libraries on PyPI (pygtrie) walk a prompt one
character at a time and forget nothing, and rendezvous hashing is one hash per member.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import orjson

from ..canonical.conversation import GenerationRequest, ImagePart, TextPart

BLOCK = 64
"""Characters per node of the prefix tree: the resolution of a matched prefix (~16 tokens)."""

BLOCKS_PER_MEMBER = 32_768
"""Prefix-tree nodes kept per member (2 MiB of prompt text, ~3 MB of memory); the least
recently used go first."""

T = TypeVar("T")


def rendezvous(key: str, members: Sequence[T], name: Callable[[T], str]) -> T:
    """The member with the highest hash of (key, member name): highest-random-weight hashing,
    so a member leaving moves only its own keys and one joining takes ~1/n of them. The hash
    is stable across processes, so replicas of ResponseKit agree."""
    return max(members, key=lambda member: _weight(key, name(member)))


def _weight(key: str, name: str) -> int:
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def prompt_text(request: GenerationRequest) -> str:
    """The prompt as the engine will see it, in an order that keeps a conversation's earlier
    turns a prefix of its later ones: model, tools, then each message."""
    parts = [request.model, "\x1d"]
    if request.tools:
        tools = [[tool.name, tool.description, tool.parameters] for tool in request.tools]
        parts.append(orjson.dumps(tools).decode())
    for message in request.messages:
        parts.append(f"\x1e{message.role}\x1f")
        for part in message.content:
            parts.append(part.text if isinstance(part, TextPart) else part.url if isinstance(part, ImagePart) else "")
        if message.reasoning:
            parts.append(f"\x1f{message.reasoning}")
        for call in message.tool_calls:
            parts.append(f"\x1f{call.name}\x1f{call.arguments}")
        if message.tool_call_id:
            parts.append(f"\x1f{message.tool_call_id}")
    return "".join(parts)


def prefix_path(text: str) -> list[int]:
    """The prefix-tree path of a prompt: one node per whole `BLOCK` of it, each named by the
    hash of its parent's name and its own text, so a name stands for the whole prefix up to
    it (as vLLM names the blocks of its prefix cache). Python's `hash` is enough: the tree
    lives in this process only."""
    path = []
    node = 0
    for start in range(0, len(text) - BLOCK + 1, BLOCK):
        node = hash((node, text[start : start + BLOCK]))
        path.append(node)
    return path


class PrefixTree:
    """The prompts one member served recently, bounded in memory (SGLang's router keeps such
    a tree per worker for its cache-aware policy).

    Nodes are kept in least-recently-used order; a prompt's nodes are touched leaf first, so
    a tree loses its leaves before the prefixes they hang from, as a radix cache evicts.
    """

    def __init__(self, capacity: int = BLOCKS_PER_MEMBER) -> None:
        self._capacity = capacity
        self._nodes: OrderedDict[int, None] = OrderedDict()

    def matched(self, path: Sequence[int]) -> int:
        """How many leading nodes of `path` the tree holds."""
        nodes = self._nodes
        count = 0
        for node in path:
            if node not in nodes:
                break
            count += 1
        return count

    def add(self, path: Iterable[int]) -> None:
        nodes = self._nodes
        for node in reversed(list(path)):
            nodes[node] = None
            nodes.move_to_end(node)
        while len(nodes) > self._capacity:
            nodes.popitem(last=False)

    def __len__(self) -> int:
        return len(self._nodes)
