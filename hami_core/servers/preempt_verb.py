"""The extender's ``preemptVerb`` (PROTOCOL.md §5): the same victims hami's own
preemption chooses (``scheduling.preemption.choose_victims``), over the nodes
kube-scheduler proposes.

kube-scheduler sends ``ExtenderPreemptionArgs`` (``Pod``, ``NodeNameToVictims`` or, with
``nodeCacheCapable``, ``NodeNameToMetaVictims``: per node its own victims and PDB
violations) and keeps only the nodes the answer names (``ExtenderPreemptionResult``,
``NodeNameToMetaVictims``: per node the victims' UIDs). The answer names one node, the
chosen one, with kube-scheduler's own victims there (freed for CPU and memory) plus
ours; no node when evicting lower-priority pods makes no room for the slices. A pod
asking no managed device is answered with kube-scheduler's proposal unchanged.
kube-scheduler 1.20.2 never calls this verb (issue 27: it nominates with zero victims);
hami's own PostFilter (``scheduling.preemptor``) is what preempts there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.errors import InvalidInputError
from hami_core.scheduling.preemptor import Preemptor


def _victims(args: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """node -> {"Pods": [{"UID": uid}], "NumPDBViolations": n} from either form."""
    out: dict[str, dict[str, Any]] = {}
    for key in ("nodenametometavictims", "nodenametovictims"):
        value = args.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InvalidInputError(f"ExtenderPreemptionArgs.{key}: must be an object")
        for node, victims in value.items():
            if not isinstance(victims, dict):
                raise InvalidInputError(f"ExtenderPreemptionArgs.{key}[{node}]: must be an object")
            pods = victims.get("Pods") or victims.get("pods") or []
            if not isinstance(pods, list):
                raise InvalidInputError(f"ExtenderPreemptionArgs.{key}[{node}].Pods: a list")
            uids = []
            for p in pods:
                if not isinstance(p, dict):
                    raise InvalidInputError(f"ExtenderPreemptionArgs.{key}[{node}]: bad victim")
                uid = p.get("UID") or p.get("uid") or (p.get("metadata") or {}).get("uid")
                if uid:
                    uids.append({"UID": str(uid)})
            n = victims.get("NumPDBViolations") or victims.get("numPDBViolations") or 0
            out.setdefault(str(node), {"Pods": uids, "NumPDBViolations": int(n)})
        break
    return out


def preemption_answer(
    preemptor: Preemptor, pod: Mapping[str, Any], args: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``ExtenderPreemptionResult`` for ``args`` (module docstring).

    Raises:
        InvalidInputError: a malformed argument or pod request.
    """
    proposed = _victims(args)
    if not preemptor.cycle_of(pod).request.wants_devices:
        return {"NodeNameToMetaVictims": proposed}
    choice = preemptor.choose(pod, list(proposed))
    cand = choice.candidate
    if cand is None:
        return {"NodeNameToMetaVictims": {}}
    theirs = proposed.get(cand.node, {"Pods": [], "NumPDBViolations": 0})
    uids = [p["UID"] for p in theirs["Pods"]]
    for v in cand.victims:
        uid = str((v.pod.get("metadata") or {}).get("uid") or "")
        if uid and uid not in uids:
            uids.append(uid)
    return {
        "NodeNameToMetaVictims": {
            cand.node: {
                "Pods": [{"UID": u} for u in uids],
                "NumPDBViolations": theirs["NumPDBViolations"] + cand.pdb_violations,
            }
        }
    }


__all__ = ["preemption_answer"]
