"""Fair sharing of busy engines: a bounded queue per key, served in turn across keys by weight.

An upstream with `max_concurrency` (or a pool whose members all have one: their sum, over the
members not cooling) takes that many generations at once. A request beyond waits in its key's
queue (at most `max_queue` waiting per key), and as places free the keys waiting are served in
turn, weighted: each admission advances its key's virtual time by 1 / weight, and the key with
the least virtual time goes next (stride scheduling: Waldspurger and Weihl, "Stride
Scheduling", MIT/LCS/TM-528, 1995). A key that was idle starts from the current virtual time,
so it cannot save up turns. A request that waits longer than its time limit is refused
(`Busy`): the frontends answer 429, or 529 `overloaded_error` on the Messages API.

Turns alone still make a light key wait for the next place to free, which under a flood of
answers that end together is most of an answer's time. So a key that generated within the last
`reserve_seconds` and holds no place now has one place kept free for it: its next request starts
at once, and the flood runs on the other places (docs/teams.md, "Busy engines, shared in turn").
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


class Busy(Exception):
    """No place freed in time, or the key's queue is full."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(slots=True)
class _Turn:
    weight: float
    admitted: asyncio.Future[None]


@dataclass(slots=True)
class _Key:
    passed: float
    """Virtual time: where this key's next admission stands in the turns."""
    held: int = 0
    last_active: float = float("-inf")
    """When it last took or gave back a place (monotonic seconds)."""
    waiting: deque[_Turn] = field(default_factory=deque)


class FairGate:
    """The places of one upstream or pool (`capacity()`, read at each decision, since a pool's
    members come and go)."""

    def __init__(self, name: str, capacity: Callable[[], int], reserve_seconds: float = 0.0) -> None:
        self.name = name
        self.capacity = capacity
        self.reserve_seconds = reserve_seconds
        self.in_use = 0
        self._keys: dict[str, _Key] = {}
        self._now = 0.0
        """Virtual time: the virtual time of the last admission."""

    @property
    def waiting(self) -> int:
        return sum(len(key.waiting) for key in self._keys.values())

    async def acquire(self, key: str, weight: float, timeout: float, max_queue: int) -> Place:
        """A place for a request of `key`, waiting in turn; `Busy` past `timeout` seconds or
        with `max_queue` of the key's requests waiting already."""
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _Key(self._now)
        elif not state.waiting:
            state.passed = max(state.passed, self._now)
        turn = _Turn(weight, asyncio.get_running_loop().create_future())
        state.waiting.append(turn)
        self._dispatch()
        if turn.admitted.done():
            return Place(self, state)
        if len(state.waiting) > max_queue:  # this one among them
            _discard(state.waiting, turn)
            raise Busy(f"{self.name} is busy and this key has {max_queue} requests waiting already.", 1.0)
        try:
            await asyncio.wait_for(asyncio.shield(turn.admitted), timeout)
        except TimeoutError:
            if turn.admitted.done() and not turn.admitted.cancelled():  # admitted as the time ran out
                return Place(self, state)
            turn.admitted.cancel()
            _discard(state.waiting, turn)
            raise Busy(f"{self.name} is busy: no place freed within {timeout:g} s.", timeout) from None
        except asyncio.CancelledError:
            if turn.admitted.done() and not turn.admitted.cancelled():
                self._release(state)  # admitted, but the client left: give the place on
            else:
                turn.admitted.cancel()
                _discard(state.waiting, turn)
            raise
        return Place(self, state)

    def _release(self, state: _Key) -> None:
        self.in_use -= 1
        state.held -= 1
        state.last_active = time.monotonic()
        self._dispatch()

    def _dispatch(self) -> None:
        capacity = self.capacity()
        if self.in_use >= capacity:
            return
        now = time.monotonic()
        recent = now - self.reserve_seconds
        idle = [name for name, state in self._keys.items() if not state.waiting and not state.held]
        kept = sum(1 for name in idle if self._keys[name].last_active >= recent) if self.reserve_seconds > 0 else 0
        for name in idle:  # forgotten once nothing they hold, wait for or are kept a place for
            state = self._keys[name]
            if state.last_active < recent and state.passed <= self._now:
                del self._keys[name]
        # Places kept free for the keys that generated lately and hold none; always one to give.
        free = capacity - self.in_use - min(kept, capacity - 1)
        while free > 0:
            ready = [state for state in self._keys.values() if state.waiting]
            if not ready:
                return
            state = min(ready, key=lambda s: s.passed)
            turn = state.waiting.popleft()
            if turn.admitted.done():  # gave up already
                continue
            self.in_use += 1
            free -= 1
            state.held += 1
            state.last_active = now
            self._now = state.passed
            state.passed += 1.0 / max(turn.weight, 1e-6)
            turn.admitted.set_result(None)


def _discard(waiting: deque[_Turn], turn: _Turn) -> None:
    try:
        waiting.remove(turn)
    except ValueError:
        pass


class Place:
    """A generation's place at an engine, given back once (`release`) when it ends."""

    __slots__ = ("gate", "key")

    def __init__(self, gate: FairGate, key: _Key) -> None:
        self.gate: FairGate | None = gate
        self.key = key

    def release(self) -> None:
        gate, self.gate = self.gate, None
        if gate is not None:
            gate._release(self.key)
