"""Pools: several engines serving one model, as one backend.

A pool picks a member for each request — by cache affinity (the member that holds the
request's prompt or key), by load or in turn (`balance`) — and sends the request elsewhere
once when its member fails before the client saw anything. A member that fails cools down
for a while that doubles while it keeps failing; the router probes members in cooldown and
a member that answers again takes requests again.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any, Literal, TypeAlias

from ..canonical.conversation import GenerationRequest
from ..canonical.events import Error, Event, Finish
from .affinity import BLOCK, PrefixTree, prefix_path, prompt_text, rendezvous
from .chat_upstream import ChatUpstream

log = logging.getLogger(__name__)

Balance: TypeAlias = Literal["affinity", "least_loaded", "round_robin"]

COOLDOWN_FIRST = 1.0
"""Seconds a member that failed once stays out of its pool."""
COOLDOWN_MAX = 60.0
"""The longest cooldown: it doubles from `COOLDOWN_FIRST` with each failure in a row up to this."""

LOAD_FACTOR = 1.25
"""Bounded load (Mirrokni et al., "Consistent Hashing with Bounded Loads"): a member with at
least `LOAD_FACTOR` × the pool's average requests in flight, plus one, takes no request that
affinity would send it; the next member in the key's rendezvous order (or the least loaded)
takes it. 1.25 keeps a hot key from queueing on one engine while moving few keys."""

PREFIX_SHARE = 0.5
"""A keyless request goes to the member holding the longest prefix of its prompt when that
prefix is at least this share of the prompt (SGLang's router's `cache_threshold`); else
the least-loaded member takes it."""


class Member:
    """One engine of a pool and what the pool knows of it; shared by the pools of every model it serves."""

    def __init__(self, upstream: ChatUpstream) -> None:
        self.upstream = upstream
        self.name = upstream.name
        self.in_flight = 0
        self.failures = 0
        """Failures in a row (the cooldown doubles with each)."""
        self.failed_total = 0
        self.cooling_until = 0.0
        self.prefixes = PrefixTree()

    def full(self) -> bool:
        """Whether it has its `max_concurrency` of generations in flight (`fairness.py` keeps the pool's total within the sum)."""
        bound = self.upstream.config.max_concurrency
        return bound is not None and self.in_flight >= bound

    def cooling(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) < self.cooling_until

    def failed(self, why: str) -> None:
        self.failures += 1
        self.failed_total += 1
        cooldown = min(COOLDOWN_FIRST * 2 ** (self.failures - 1), COOLDOWN_MAX)
        self.cooling_until = time.monotonic() + cooldown
        # Said once when it starts failing; the probes that keep failing are debug.
        log.log(logging.WARNING if self.failures == 1 else logging.DEBUG,
                "upstream %s failed (%s): out of its pool for %g s", self.name, why, cooldown)  # fmt: skip

    def answered(self) -> None:
        """It served a request or answered a probe: it takes requests again."""
        if self.failures:
            log.info("upstream %s answers again: back in its pool", self.name)
        self.failures = 0
        self.cooling_until = 0.0

    def state(self) -> dict[str, Any]:
        """For `/health`: `cooling` from its failure until it answers again (it takes a request
        again only once its cooldown is over), its requests in flight, its failures so far."""
        return {"state": "cooling" if self.failures else "healthy", "in_flight": self.in_flight,
                "failures": self.failed_total}  # fmt: skip


def engine_down(error: Error) -> bool:
    """Whether an error says the engine itself is failing (not the request, nor its rate limit)."""
    return error.unanswered or error.fault == "dropped" or error.code == "timeout"


class Pool:
    """The members serving one model, as one `Backend`."""

    counts_locally = False
    kind = "pool"

    def __init__(self, name: str, members: Sequence[Member], balance: Balance = "affinity") -> None:
        self.name = name
        self.members = tuple(members)
        self.balance = balance
        self._turn = itertools.count()

    def choose(self, request: GenerationRequest, avoid: Member | None = None) -> Member:
        """The member to send `request` to (never `avoid`, the one that just failed, if another exists)."""
        candidates = [member for member in self.members if member is not avoid] or list(
            self.members
        )
        now = time.monotonic()
        usable = [member for member in candidates if not member.cooling(now)]
        if not usable:  # every member is cooling: the one back soonest is the best chance
            return min(candidates, key=lambda member: member.cooling_until)
        usable = [member for member in usable if not member.full()] or usable
        if self.balance == "round_robin":
            return usable[next(self._turn) % len(usable)]
        if self.balance == "least_loaded":
            return self._least_loaded(usable)
        return self._by_affinity(request, usable)

    def _least_loaded(self, members: Sequence[Member]) -> Member:
        """The member with the fewest requests in flight; ties take turns, so that requests
        that come one at a time still spread."""
        fewest = min(member.in_flight for member in members)
        idle = [member for member in members if member.in_flight == fewest]
        return idle[next(self._turn) % len(idle)]

    def _by_affinity(self, request: GenerationRequest, members: Sequence[Member]) -> Member:
        average = sum(member.in_flight for member in members) / len(members)
        bound = LOAD_FACTOR * average + 1
        open_ = [member for member in members if member.in_flight < bound] or list(members)
        text = prompt_text(request)
        path = prefix_path(text)
        chosen: Member | None = None
        if request.affinity_key is not None:
            chosen = rendezvous(request.affinity_key, open_, name=lambda member: member.name)
        elif path:
            best = max(open_, key=lambda member: member.prefixes.matched(path))
            if best.prefixes.matched(path) * BLOCK >= PREFIX_SHARE * len(text):
                chosen = best
        if chosen is None:
            chosen = self._least_loaded(open_)
        chosen.prefixes.add(path)
        return chosen

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        member = self.choose(request)
        retried = False
        while True:
            failover: Error | None = None
            member.in_flight += 1
            try:
                async with aclosing(member.upstream.generate(request)) as events:
                    sent = False
                    async for event in events:
                        if isinstance(event, Error):
                            if engine_down(event):
                                member.failed(event.message)
                            if (
                                not sent
                                and event.unanswered
                                and not retried
                                and len(self.members) > 1
                            ):
                                failover = event
                                break
                        elif isinstance(event, Finish):
                            member.answered()
                        sent = True
                        yield event
            finally:
                member.in_flight -= 1
            if failover is None:
                return
            retried = True
            member = self.choose(request, avoid=member)
            log.warning(
                "pool %s: sending a request to upstream %s instead (%s)",
                self.name,
                member.name,
                failover.message,
            )

    async def list_models(self) -> list[str]:
        names: list[str] = []
        for member in self.members:
            names += await member.upstream.list_models()
        return list(dict.fromkeys(names))

    def context_window(self, model: str) -> int | None:
        """The smallest window a member knows (a request may go to any), each member fitting its own
        requests to its own."""
        return min(filter(None, (member.upstream.context_window(model) for member in self.members)), default=None)

    def reads_images(self, model: str) -> bool | None:
        """The members serve one model: text only if any member says so, else what one says."""
        answers = {member.upstream.reads_images(model) for member in self.members}
        return False if False in answers else True if True in answers else None

    def images_source(self, model: str) -> str | None:
        reads = self.reads_images(model)
        for member in self.members:
            if member.upstream.reads_images(model) == reads:
                return member.upstream.images_source(model)
        return None

    def fetches_image_urls(self, model: str) -> bool:
        """Only when every member does: the request may go to any of them."""
        return all(member.upstream.fetches_image_urls(model) for member in self.members)

    def learn_text_only(self, model: str) -> None:
        for member in self.members:
            member.upstream.learn_text_only(model)

    async def count_tokens(self, request: GenerationRequest) -> tuple[int, bool]:
        """Counted by the least-loaded member (a count is not a generation: no prefix is recorded)."""
        usable = [member for member in self.members if not member.cooling()] or self.members
        return await self._least_loaded(usable).upstream.count_tokens(request)

    async def aclose(self) -> None:
        """The members are the router's upstreams: it closes them."""
