"""Gang groups on the real pipeline: time from the creation of a group's last member to
all its members bound (issue 27's figure: p99 <= 3 s for 16 members at 500 nodes).

Everything is real but the kubelets, as in ``bench_pipeline.py`` (both start the stack of
``pipeline_stack.py``; this reuses bench_pipeline's fake nodes): etcd + kube-apiserver,
``hami webhook``, ``hami scheduler`` as kube-scheduler 1.20's extender
(filter / prioritize / bind), and the stand-in kubelets whose device plugins allocate
each bound pod (``--trust`` as ``bench_pipeline.py``'s: by default ``signed``, the shipped
path: allocations signed and verified, nodes claim PodResources and binds take no lock;
``off``: every bind takes HAMi's node lock).

Per trial: 15 members of a group (``scheduling.x-k8s.io/pod-group``, minMember 16,
2 GPUs each) are created and kube-scheduler tries each once (the extender refuses them,
``GroupDoesNotFit``: kube-scheduler parks them as unschedulable, to be retried after up
to 60 s unless something wakes them); then the 16th member is created and the clock runs
from its creation until all 16 are bound: the group is placed at the 16th member's
filter, and the others are woken by the scheduler's ``hami.io/gang-placed`` write.

    .venv/bin/python benchmarks/bench_gang.py [--quick] [--trials N] [--trust signed|off|all]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import add_nodes, clear, create_pods, pod_body
from kubernetes import client as k8s
from pipeline_stack import HAMI_NS, MANAGED, TRUST_MODES, claims_podresources, running_stack

from tests.standin_kubelet import DEFAULT_ADMISSION_DELAY_S

MEMBERS = 16
TARGET_S = 3.0


def member(trial: int, i: int) -> dict[str, Any]:
    body = pod_body(
        f"g{trial}-m{i:02}", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8000"}, scheduler=None
    )
    body["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": f"group-{trial}"}
    body["metadata"]["annotations"] = {"hami.io/gang-min-member": str(MEMBERS)}
    return body


def pods(core: k8s.CoreV1Api) -> list[dict[str, Any]]:
    resp = core.list_namespaced_pod(HAMI_NS, _preload_content=False)
    return list(json.loads(resp.data)["items"])


def unschedulable(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
            return True
    return False


def wait(check: Any, timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout_s:.0f} s")
        time.sleep(poll_s)


def trial(core: k8s.CoreV1Api, n: int) -> float:
    create_pods(core, HAMI_NS, [member(n, i) for i in range(MEMBERS - 1)])
    wait(
        lambda: sum(unschedulable(p) for p in pods(core)) >= MEMBERS - 1,
        120,
        "the first members refused",
        poll_s=0.2,
    )
    assert not any((p.get("spec") or {}).get("nodeName") for p in pods(core))
    t0 = time.monotonic()
    core.create_namespaced_pod(HAMI_NS, member(n, MEMBERS - 1))
    try:
        wait(
            lambda: sum(bool((p.get("spec") or {}).get("nodeName")) for p in pods(core)) >= MEMBERS,
            120,
            "all members bound",
        )
    except TimeoutError:
        bound = sum(bool((p.get("spec") or {}).get("nodeName")) for p in pods(core))
        print(f"  group {n}: {bound} of {MEMBERS} bound; the last member's events:", flush=True)
        for e in core.list_namespaced_event(
            HAMI_NS, field_selector=f"involvedObject.name=g{n}-m{MEMBERS - 1:02}"
        ).items:
            print(f"    {e.reason}: {e.message[:300]}", flush=True)
        raise
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="100 nodes, 3 trials")
    ap.add_argument("--trials", type=int, default=0, help="groups placed (default 10; quick 3)")
    ap.add_argument(
        "--trust",
        choices=TRUST_MODES,
        default="signed",
        help="as bench_pipeline's: signed (default, the shipped path), allocations signed "
        "and verified, nodes claim PodResources, no lock; off, every bind takes HAMi's node "
        "lock (members on one node bind one after another's Allocate); all, every "
        "allocation trusted unread, no lock",
    )
    args = ap.parse_args()
    size = 100 if args.quick else 500
    trials = args.trials or (3 if args.quick else 10)
    times: list[float] = []
    with running_stack(trust=args.trust, admission_delay_s=DEFAULT_ADMISSION_DELAY_S) as stack:
        add_nodes(stack.cp, 0, size, claims=claims_podresources(args.trust))
        stack.cp.start_scheduler(
            extender_url=stack.url, managed_resources=MANAGED, http_timeout="30s"
        )
        for n in range(trials):
            seconds = trial(stack.core, n)
            times.append(seconds)
            print(
                f"  group {n}: {MEMBERS} members bound {seconds:.2f} s after the last", flush=True
            )
            clear(stack.core, HAMI_NS)
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    print(
        f"real kube-apiserver + kube-scheduler 1.20 + hami; fake nodes x 8 GPUs; trust {args.trust}"
    )
    print(f"{'nodes':>6} {'members':>8} {'groups':>7} {'median s':>9} {'p99 s':>6}")
    print(f"{size:>6} {MEMBERS:>8} {len(times):>7} {ordered[len(ordered) // 2]:>9.2f} {p99:>6.2f}")
    print(
        f"headline: gang of {MEMBERS} placed, p99 last member created -> all bound = "
        f"{p99:.2f} s (target <= {TARGET_S:.0f} s)"
    )


if __name__ == "__main__":
    main()
