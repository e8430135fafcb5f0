"""Retrying against an unreachable API server: exponential backoff with jitter, and one
log line per change of state instead of one per attempt (issue #12 item 12).

The delay after the n-th consecutive failure is drawn uniformly from
``[base_s * 2**(n-1) / 2, base_s * 2**(n-1)]``, capped at ``max_s`` ("equal jitter", so
many clients that lost the same API server do not retry in step; AWS Architecture Blog,
"Exponential Backoff And Jitter"). client-go's reflector backs off the same way
(``wait.NewExponentialBackoffManager``, 800 ms to 30 s).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import attrs


@attrs.define
class Backoff:
    """The retry state of one loop.

    Attributes:
        what: names the loop in the log (``pods watch``).
        log: where state changes are logged (WARNING when failing starts, INFO when it
            recovers; the attempts in between at DEBUG).
        base_s: delay after the first failure (seconds, before jitter).
        max_s: the largest delay.
        failures: consecutive failures so far.
    """

    what: str
    log: logging.Logger
    base_s: float = 0.8
    max_s: float = 30.0
    failures: int = 0
    rand: Callable[[float, float], float] = random.uniform

    def failed(self, exc: BaseException) -> float:
        """Record a failure; return the seconds to wait before the next attempt."""
        self.failures += 1
        if self.failures == 1:
            self.log.warning("%s failing (%s); retrying with backoff", self.what, exc)
        else:
            self.log.debug("%s attempt %d failed: %s", self.what, self.failures, exc)
        ceiling = min(self.max_s, self.base_s * 2 ** (self.failures - 1))
        return self.rand(ceiling / 2, ceiling)

    def succeeded(self) -> None:
        """Record a success; logs once when it ends a run of failures."""
        if self.failures:
            self.log.info("%s recovered after %d failed attempts", self.what, self.failures)
        self.failures = 0
