"""``hami explain NAMESPACE/POD``: why one pod is Pending, or where it runs.

Reads the cluster once (the API server or a snapshot, as ``hami defrag`` reads it) and
asks the scheduler's own engine: the filter's reason codes per node and GPU, the
namespace's quota, the node locks, preemption's dry run (``choose_victims``) and the
consolidation planner (``hami_core.defrag.planner``). Nothing is written to the cluster.
``engine.explain`` builds the answer as data; ``render`` prints it as text, JSON or YAML.
"""

from .engine import (
    EXIT_ERROR,
    EXIT_NOT_OURS,
    EXIT_PENDING,
    EXIT_PLACED,
    SCHEMA,
    exit_code,
    explain,
)
from .render import render_text

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_OURS",
    "EXIT_PENDING",
    "EXIT_PLACED",
    "SCHEMA",
    "explain",
    "exit_code",
    "render_text",
]
