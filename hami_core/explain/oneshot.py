"""The garbage collector of a command that reads the cluster once, answers and exits.

``hami explain`` builds the scheduler's state from every pod listed (27 646 bound pods
at 1000 nodes x 8 GPUs): tens of thousands of long-lived dicts, which Python's
generational collector walks again each time the young generation fills. None of them is
garbage until the process exits, and what does become garbage is freed by reference
counting. ``bench_explain`` measured the collector at about 40 % of the answer's CPU at
1000 nodes (docs/performance.md). ``hami scheduler`` moves its caches out of the
collector's sight instead (``servers.scheduler_main.settle_gc``): it lives on.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (reference counting still frees
    what it can); it is enabled again after, if it was before, and collects then.

    For one-shot commands only: a long-running process pausing it would grow with every
    reference cycle it makes meanwhile.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
