"""Fair sharing of busy engines: a bounded queue per key, served in turn across keys by weight.

An upstream with `max_concurrency` (or a pool whose members all have one: their sum, over the
members not cooling) takes that many generations at once. A request beyond waits in its key's
queue (at most `max_queue` waiting per key), and as places free the keys waiting are served in
turn, weighted: each admission advances its key's virtual time by 1 / weight, and the key with
the least virtual time goes next (stride scheduling: Waldspurger and Weihl, "Stride
Scheduling", MIT/LCS/TM-528, 1995). A key that was idle starts from the current virtual time,
so it cannot save up turns. A request that waits longer than its time limit is refused
(`Busy`): the frontends answer 429, or 529 `overloaded_error` on the Messages API.

So one key flooding an engine with many parallel streams holds at most its share of the places
once another key waits: the other key's request goes next, not behind the flood.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


class Busy(Exception):
    """No place freed in time, or the key's queue is full."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(slots=True)
class _Key:
    passed: float = 0.0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)


class FairGate:
    """The places of one upstream or pool (`capacity()`, read at each decision, since a pool's
    members come and go)."""

    def __init__(self, name: str, capacity: Callable[[], int]) -> None:
        self.name = name
        self.capacity = capacity
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
        if self.in_use < self.capacity() and not self.waiting:
            self._admit(state, weight)
            return Place(self)
        if len(state.waiting) >= max_queue:
            raise Busy(f"{self.name} is busy and this key has {max_queue} requests waiting already.", 1.0)
        turn = asyncio.get_running_loop().create_future()
        turn.weight = weight  # type: ignore[attr-defined]
        state.waiting.append(turn)
        try:
            await asyncio.wait_for(asyncio.shield(turn), timeout)
        except TimeoutError:
            if turn.done() and not turn.cancelled():  # admitted as the time ran out: keep the place
                return Place(self)
            turn.cancel()
            _discard(state.waiting, turn)
            raise Busy(f"{self.name} is busy: no place freed within {timeout:g} s.", timeout) from None
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release()  # admitted, but the client left: give the place on
            else:
                turn.cancel()
                _discard(state.waiting, turn)
            raise
        return Place(self)

    def release(self) -> None:
        self.in_use -= 1
        self._dispatch()

    def _admit(self, state: _Key, weight: float) -> None:
        self.in_use += 1
        self._now = state.passed
        state.passed += 1.0 / max(weight, 1e-6)

    def _dispatch(self) -> None:
        while self.in_use < self.capacity():
            ready = [state for state in self._keys.values() if state.waiting]
            if not ready:
                return
            state = min(ready, key=lambda s: s.passed)
            turn = state.waiting.popleft()
            if turn.done():  # gave up already
                continue
            self._admit(state, turn.weight)  # type: ignore[attr-defined]
            turn.set_result(None)
        for name in [name for name, state in self._keys.items() if not state.waiting and state.passed <= self._now]:
            del self._keys[name]  # idle keys forget nothing they need: they start from `_now` again


def _discard(waiting: deque[asyncio.Future[None]], turn: asyncio.Future[None]) -> None:
    try:
        waiting.remove(turn)
    except ValueError:
        pass


class Place:
    """A generation's place at an engine, given back once (`release`) when it ends."""

    __slots__ = ("gate",)

    def __init__(self, gate: FairGate) -> None:
        self.gate: FairGate | None = gate

    def release(self) -> None:
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.release()
