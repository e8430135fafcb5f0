"""The kube-scheduler extender (PROTOCOL.md §5): ``/filter``, ``/prioritize`` (``/score``),
``/bind``, health and introspection, as a Flask app factory.

kube-scheduler expects HTTP 200 with the error in the ``Error`` field
(``ExtenderFilterResult`` / ``ExtenderBindingResult``, Kubernetes
``k8s.io/kube-scheduler/extender/v1``); keys are Go field names, and we accept any case.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Response, abort, jsonify, request

from hami_core.errors import ConflictError, HamiError, InvalidInputError
from hami_core.facts.priority import outranks_default
from hami_core.protocol.pods import pod_ref
from hami_core.scheduling.assumed import AssumedSlices
from hami_core.scheduling.preemptor import Preemptor
from hami_core.scheduling.scheduler import Scheduler
from hami_core.scheduling.scoring import extender_score

from .metrics import SchedulerMetrics
from .options import FILTER_ANSWERS
from .preempt_verb import preemption_answer

log = logging.getLogger(__name__)


#: kube-scheduler's ExtenderArgs carry one pod and (at most) all nodes; 64 MiB is far
#: above any real cluster's NodeList and keeps a hostile body from eating memory.
MAX_BODY_BYTES = 64 * 1024 * 1024


def _body() -> Any:
    """The request's JSON, or an ``InvalidInputError`` that says why not."""
    try:
        return request.get_json(force=True, silent=True)
    except RecursionError:
        raise InvalidInputError("the request body nests too deeply") from None


def _fold(data: Any) -> dict[str, Any]:
    """Top-level keys lower-cased, so ``NodeNames``, ``nodenames`` and ``nodeNames`` agree."""
    if not isinstance(data, dict):
        raise InvalidInputError("the request body must be a JSON object")
    return {str(k).lower(): v for k, v in data.items()}


def _pod(args: Mapping[str, Any]) -> dict[str, Any]:
    pod = args.get("pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise InvalidInputError("ExtenderArgs.Pod must be a Pod object")
    return pod


def _node_names(args: Mapping[str, Any]) -> list[str] | None:
    names = args.get("nodenames")
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidInputError("ExtenderArgs.NodeNames must be a list of strings")
    return list(dict.fromkeys(names))  # each node answered once, in kube-scheduler's order


def _nodes(args: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    nodes = args.get("nodes")
    if nodes is None:
        return None
    if not isinstance(nodes, dict):
        raise InvalidInputError("ExtenderArgs.Nodes must be a NodeList object ({'items': [...]})")
    items = nodes.get("items")
    if items is None:  # Go writes an empty NodeList's items as null
        return None
    if not isinstance(items, list) or not all(
        isinstance(n, dict)
        and isinstance(n.get("metadata"), dict)
        and isinstance(n["metadata"].get("name"), str)
        and (
            n["metadata"].get("annotations") is None
            or isinstance(n["metadata"]["annotations"], dict)
        )
        for n in items
    ):
        raise InvalidInputError(
            "ExtenderArgs.Nodes.items must be a list of Node objects with metadata.name"
        )
    first: dict[str, dict[str, Any]] = {}  # each node answered once, in kube-scheduler's order
    for n in items:
        first.setdefault(n["metadata"]["name"], n)
    return list(first.values())


def create_extender_app(
    scheduler: Scheduler,
    *,
    is_leader: Callable[[], bool] = lambda: True,
    leader_identity: Callable[[], str | None] = lambda: None,
    is_ready: Callable[[], bool] = lambda: True,
    metrics: SchedulerMetrics | None = None,
    preemptor: Preemptor | None = None,
    on_no_node: Callable[[Mapping[str, Any]], None] | None = None,
    filter_answer: str = "all",
) -> Flask:
    """Build the extender app.

    Args:
        scheduler: the engine over the cluster store.
        is_leader: only the leader binds; a follower's ``/bind`` answers an error so
            kube-scheduler retries (against whichever replica is leader then).
        leader_identity: who leads, for the follower's error message.
        is_ready: ``/readyz`` answers 200 only when this is true (caches synced).
        metrics: where durations and bind outcomes are recorded.
        preemptor: slice-aware preemption: a pod the filter finds no node for is handed
            to it (leader only, off this thread); it answers ``/preempt`` too.
        on_no_node: told of every such pod as well (leader only; cheap, never raises):
            continuous consolidation's queue (``defrag.continuous``).
        filter_answer: ``all``: ``/filter`` answers every node that fits; ``best``: only
            the one ``chosen_node`` picks (``hami scheduler --filter-answer``, default
            there), so kube-scheduler 1.20 skips scoring and calls no ``/prioritize``.

    Raises:
        ValueError: ``filter_answer`` is not one of ``FILTER_ANSWERS``.
    """
    if filter_answer not in FILTER_ANSWERS:
        raise ValueError(
            f"filter_answer {filter_answer!r}: expected one of {', '.join(FILTER_ANSWERS)}"
        )
    app = Flask("hami-scheduler")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    assumed = AssumedSlices(scheduler.state, scheduler.manager, scheduler.gangs.reader)

    @app.before_request
    def limit_body() -> None:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            abort(413, f"request body over {MAX_BODY_BYTES} bytes")

    app.json.sort_keys = False  # type: ignore[attr-defined]

    def timed(hist: Any) -> Any:
        return hist.time() if hist is not None else _Null()

    @app.post("/filter")
    def filter_() -> Response:
        with timed(metrics.filter_seconds if metrics else None):
            names: list[str] = []
            try:
                args = _fold(_body())
                pod = _pod(args)
                nodes = _nodes(args)
                if (
                    nodes is not None
                ):  # full Nodes (nodeCacheCapable: false, autoscaler): write nothing
                    result = scheduler.filter_objects(pod, nodes)
                    feasible = set(result.feasible)
                    return jsonify(
                        {
                            "Nodes": {
                                "apiVersion": "v1",
                                "kind": "NodeList",
                                "items": [
                                    n for n in nodes if n["metadata"].get("name") in feasible
                                ],
                            },
                            "NodeNames": list(result.feasible),
                            "FailedNodes": dict(result.failed),
                            "FailedAndUnresolvableNodes": {},
                            "Error": "",
                        }
                    )
                names = _node_names(args) or []
                result = scheduler.filter(pod, names)
            except HamiError as exc:
                if metrics:
                    metrics.filter_outcomes.labels("error").inc()
                return jsonify(_filter_error(names, str(exc)))
            except Exception as exc:  # never let kube-scheduler see a 500 stack trace
                log.exception("filter failed")
                if metrics:
                    metrics.filter_outcomes.labels("error").inc()
                return jsonify(_filter_error(names, f"internal error: {exc}"))
            if metrics:
                metrics.filter_outcomes.labels("fit" if result.feasible else "nofit").inc()
            if result.fits and is_leader():  # only the leader writes; events tell the pod's owner
                _filter_event(scheduler, pod, result.feasible, result.failed)
                if not result.feasible and preemptor is not None:
                    preemptor.request(pod, names)  # PostFilter, off this thread
                if not result.feasible and on_no_node is not None:
                    on_no_node(pod)  # consolidation's queue, off this thread
            error = ""
            if not result.feasible and result.fits and outranks_default(pod):
                # hami preempts for slices; kube-scheduler's own PostFilter must not run
                # (1.20.2 panics on two zero-victim candidates): an error skips it
                error = _no_room(pod, result.failed)
            answered = list(result.feasible)
            if filter_answer == "best" and len(answered) > 1 and result.fits:
                answered = [chosen_node(scheduler, pod, answered)]
            if filter_answer == "best" and len(answered) == 1:
                fit = result.fits.get(answered[0])
                if fit is not None and fit.allocation and fit.allocation.node == answered[0]:
                    # kube-scheduler binds it while it filters the next pod: held till then
                    assumed.assume(pod, fit.allocation)
            return jsonify(
                {
                    "NodeNames": answered,
                    "FailedNodes": dict(result.failed),
                    "FailedAndUnresolvableNodes": {},
                    "Error": error,
                }
            )

    def prioritize() -> Response:
        with timed(metrics.score_seconds if metrics else None):
            try:
                args = _fold(_body())
                pod = _pod(args)
                nodes = _nodes(args)
                if nodes is not None:
                    result = scheduler.filter_objects(pod, nodes)
                    names = [str(n["metadata"].get("name")) for n in nodes]
                    scores = [
                        (n, extender_score(result.scores[n]) if n in result.scores else 0)
                        for n in names
                    ]
                else:
                    scores = scheduler.prioritize(pod, _node_names(args) or [])
            except HamiError as exc:
                log.warning("prioritize: %s", exc)
                return jsonify([])
            except Exception:
                log.exception("prioritize failed")
                return jsonify([])
            return jsonify([{"Host": n, "Score": s} for n, s in scores])

    app.add_url_rule("/prioritize", "prioritize", prioritize, methods=["POST"])
    app.add_url_rule("/score", "score", prioritize, methods=["POST"])

    @app.post("/bind")
    def bind() -> Response:
        with timed(metrics.bind_seconds if metrics else None):
            try:
                args = _fold(_body())
                fields = {k: args.get(k) for k in ("podname", "podnamespace", "poduid", "node")}
                missing = [k for k, v in fields.items() if v is None or v == ""]
                if missing:
                    raise InvalidInputError(f"ExtenderBindingArgs: missing {', '.join(missing)}")
                mistyped = [k for k, v in fields.items() if not isinstance(v, str)]
                if mistyped:
                    raise InvalidInputError(
                        f"ExtenderBindingArgs: {', '.join(mistyped)} must be strings"
                    )
                if not is_leader():
                    leader = leader_identity() or "unknown"
                    raise ConflictError(f"this replica is not the leader (leader: {leader}); retry")
                scheduler.bind(
                    str(fields["podnamespace"]),
                    str(fields["podname"]),
                    uid=str(fields["poduid"]),
                    node=str(fields["node"]),
                )
            except HamiError as exc:
                if metrics:
                    metrics.bind_failure.inc()
                return jsonify({"Error": str(exc)})
            except Exception as exc:
                log.exception("bind failed")
                if metrics:
                    metrics.bind_failure.inc()
                return jsonify({"Error": f"internal error: {exc}"})
            if metrics:
                metrics.bind_success.inc()
            return jsonify({"Error": ""})

    @app.post("/preempt")
    def preempt() -> Response:
        try:
            if preemptor is None:
                raise InvalidInputError("preemption is not enabled on this scheduler")
            args = _fold(_body())
            pod = _pod(args)
            answer = preemption_answer(preemptor, pod, args)
            log.info("preemptVerb for %s: %s", pod_ref(pod), answer["NodeNameToMetaVictims"])
            return jsonify(answer)
        except HamiError as exc:
            return jsonify({"NodeNameToMetaVictims": {}, "Error": str(exc)})
        except Exception as exc:
            log.exception("preempt failed")
            return jsonify({"NodeNameToMetaVictims": {}, "Error": f"internal error: {exc}"})

    @app.get("/healthz")
    def healthz() -> tuple[str, int]:
        return "ok", 200

    @app.get("/readyz")
    def readyz() -> tuple[str, int]:
        return ("ok", 200) if is_ready() else ("caches not synced", 503)

    @app.get("/-/backends")
    def backends() -> Response:
        return jsonify(
            [
                {
                    "name": r.name,
                    "version": r.version,
                    "vendors": list(r.info.vendors),
                    "hooks": list(r.hooks),
                }
                for r in scheduler.manager.backends
            ]
        )

    @app.get("/-/leader")
    def leader() -> Response:
        return jsonify({"leader": is_leader(), "identity": leader_identity()})

    @app.errorhandler(404)
    @app.errorhandler(405)
    @app.errorhandler(413)
    def not_found(exc: Any) -> tuple[Response, int]:
        return jsonify({"Error": str(exc)}), exc.code

    return app


def _no_room(pod: Mapping[str, Any], failed: Mapping[str, str]) -> str:
    """The filter's ``Error`` for a pod hami preempts for (PROTOCOL.md §5): kube-scheduler
    runs no PostFilter of its own after an extender error, and shows this message in its
    ``FailedScheduling`` event."""
    counts: dict[str, int] = {}
    for reason in failed.values():
        counts[reason] = counts.get(reason, 0) + 1
    detail = ", ".join(f"{n} node(s) {r}" for r, n in sorted(counts.items()))
    return (
        f"0/{len(failed)} nodes fit for {pod_ref(pod)} ({detail}); hami's preemption "
        "looks for lower-priority pods to evict"
    )


def _filter_error(names: list[str], message: str) -> dict[str, Any]:
    return {"NodeNames": [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def chosen_node(scheduler: Scheduler, pod: Mapping[str, Any], feasible: list[str]) -> str:
    """The node of ``feasible`` (nodes the pod fits, in kube-scheduler's order) that
    ``/prioritize`` would put alone at the top: the pod's node policy's first, a node
    another pod is being bound to set aside while a free one exists, reserved for this
    pod's bind (``Scheduler.prioritize``); ties (a pod without a UID) go to the first.

    HAMi's filter answers only its chosen node too; kube-scheduler 1.20 then has one
    feasible node, runs no scoring and calls no ``/prioritize``: one round trip per pod.
    """
    ranked = scheduler.prioritize(pod, feasible)
    top = max(score for _, score in ranked)
    return next(node for node, score in ranked if score == top)


def _filter_event(
    scheduler: Scheduler, pod: dict[str, Any], feasible: tuple[str, ...], failed: Mapping[str, str]
) -> None:
    total = len(feasible) + len(failed)
    if feasible:
        if not scheduler.success_events:  # hami scheduler --success-events
            return
        kind, reason = "Normal", "FilteringSucceed"
        message = f"{len(feasible)}/{total} nodes fit: {', '.join(feasible)}"
    else:
        kind, reason = "Warning", "FilteringFailed"
        detail = "; ".join(f"{n}: {r}" for n, r in sorted(failed.items()))
        message = f"0/{total} nodes fit for {pod_ref(pod)}: {detail}"
    try:
        scheduler.events.record_event(pod, type=kind, reason=reason, message=message)
    except Exception as exc:
        log.warning("cannot record %s event: %s", reason, exc)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
