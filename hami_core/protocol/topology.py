"""Device link-score annotation codec (``hami.io/node-nvidia-score``, PROTOCOL.md §2).

Value: ``[{"uuid": "GPU-a", "score": {"GPU-b": 200, ...}}, ...]``. Scores: NVLink with k
links 100*k; same board 60; one PCIe switch 50; several switches 40; same host bridge
30; same CPU 20; across CPUs 10 (HAMi's topology-aware policy).

Any integer is a score, negative ones included: HAMi's topology policy only compares
sums of them (``pkg/device/nvidia`` ``TestFit_TopologyNegativeScores``: scores -5, -3,
-1; two GPUs take the pair of highest sum, -1; one GPU the device of lowest sum to the
others, -8), so a writer may rank its links below "across CPUs" or below a missing pair
(which counts 0). Only a score a Go ``int`` cannot hold (beyond 64 bits) is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from hami_core.errors import AnnotationError

#: The range of a Go ``int`` on 64-bit platforms (HAMi decodes scores into one).
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def encode_link_scores(scores: Mapping[str, Mapping[str, int]]) -> str:
    """Encode ``{uuid: {other: score}}`` in uuid order."""
    return json.dumps(
        [{"uuid": u, "score": dict(sorted(scores[u].items()))} for u in sorted(scores)],
        separators=(",", ":"),
    )


def decode_link_scores(value: str, *, node: str) -> dict[str, dict[str, int]]:
    """Decode the annotation; scores are made symmetric (the larger side wins when both
    sides are listed).

    Returns:
        ``{uuid: {other uuid: score}}``, any 64-bit integer a score (module docstring).

    Raises:
        AnnotationError: not the documented shape; names the node.
    """
    try:
        items = json.loads(value)
    except json.JSONDecodeError as exc:
        raise AnnotationError(f"node {node}: link scores are not valid JSON: {exc}") from exc
    if not isinstance(items, list):
        raise AnnotationError(f"node {node}: link scores must be a JSON array")
    out: dict[str, dict[str, int]] = {}
    for pos, item in enumerate(items):
        where = f"node {node}: link score entry #{pos}"
        if not isinstance(item, dict) or not isinstance(item.get("uuid"), str):
            raise AnnotationError(f"{where}: expected {{'uuid': str, 'score': {{...}}}}")
        score = item.get("score") or {}
        if not isinstance(score, dict):
            raise AnnotationError(f"{where}: score must be an object")
        for other, s in score.items():
            if not isinstance(s, int) or isinstance(s, bool) or not INT64_MIN <= s <= INT64_MAX:
                raise AnnotationError(f"{where}: score to {other[:80]!r} must be a 64-bit integer")
            a, b = item["uuid"], other
            have = out.get(a, {}).get(b)
            best = s if have is None else max(s, have)
            out.setdefault(a, {})[b] = best
            out.setdefault(b, {})[a] = best
    return out
