"""The mutating admission webhook (PROTOCOL.md §6) as a Flask app factory.

``POST /webhook`` takes an AdmissionReview (``admission.k8s.io/v1`` or ``v1beta1``) and
answers in the same version with the request's ``uid``. The CREATE of a Pod is reviewed
and mutated (by ``hami_core.webhook.Admission``); the UPDATE of a Pod or of its status
is checked for scheduler-owned annotations written by someone other than a trusted
user (PROTOCOL.md §6); every other operation or kind is allowed unchanged. A review that cannot be read answers HTTP 400 with ``{"error": message}``;
one whose ``uid`` is known but whose content is bad (or whose review failed) answers an
AdmissionReview that denies with the message, so ``kubectl`` shows the cause. The app
never answers a 500 stack trace.

``GET /healthz`` answers while the process serves; ``GET /readyz`` answers 200 when
``is_ready()`` (e.g. the quota caches have listed), else 503.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from hami_core.errors import HamiError, NotFoundError
from hami_core.webhook import Admission, AdmissionResult
from hami_core.webhook.mutation import apply_patch

from .review import MalformedReview, ReviewRequest, parse_review, review_response

log = logging.getLogger(__name__)

#: Largest request body read (bytes). The API server caps objects at about 3 MiB.
MAX_BODY_BYTES = 16 * 1024 * 1024

#: ``response.status.code`` of a denial by reason; reasons not listed are 403.
DENIAL_CODES: Mapping[str, int] = {"InvalidRequest": 400}


def create_webhook_app(
    admission: Admission,
    *,
    namespace_labels: Callable[[str], Mapping[str, str]] | None = None,
    is_ready: Callable[[], bool] = lambda: True,
) -> Flask:
    """Build the webhook app.

    Args:
        admission: decides and patches pods (its ``store`` gives namespace quotas).
        namespace_labels: namespace name -> its labels (``hami.io/webhook: ignore``
            leaves the namespace alone). In production a cached API lookup
            (``NamespaceLabels``). When it raises, a pod that asks for no managed
            device is still allowed; one that does is denied with code 500, since
            the namespace may have opted out.
        is_ready: ``/readyz`` answers 200 only when this is true.

    Returns:
        The Flask app; serve it over HTTPS (``hami_core.servers.https``).
    """
    app = Flask("hami-webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.json.sort_keys = False  # type: ignore[attr-defined]

    @app.errorhandler(Exception)
    def error(exc: Exception) -> tuple[Response, int]:
        """The one error handler: JSON ``{"error": message}`` with the status of the error."""
        if isinstance(exc, HTTPException):
            return jsonify({"error": exc.description or exc.name}), exc.code or 500
        if isinstance(exc, HamiError):
            return jsonify({"error": str(exc)}), exc.http_status
        log.exception("unexpected error on %s %s", request.method, request.path)
        return jsonify({"error": f"internal error: {type(exc).__name__}"}), 500

    @app.get("/healthz")
    def healthz() -> Response:
        return jsonify({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> tuple[Response, int]:
        if is_ready():
            return jsonify({"status": "ok"}), 200
        return jsonify({"status": "not ready"}), 503

    @app.post("/webhook")
    def webhook() -> Response:
        body = _json_body(request.get_data(cache=False))
        try:
            review = parse_review(body)
        except MalformedReview as exc:
            if exc.api_version is None or exc.uid is None:
                raise
            log.warning("malformed AdmissionReview %s: %s", exc.uid, exc)
            return jsonify(
                review_response(
                    exc.api_version,
                    exc.uid,
                    allowed=False,
                    code=400,
                    message=str(exc),
                    reason="BadRequest",
                )
            )
        return jsonify(_answer(admission, review, namespace_labels))

    return app


#: Deepest JSON nesting read. A Pod is about 10 levels deep; Python's parser would raise
#: ``RecursionError`` near 1000 levels (a 500 before): deeper bodies are a 400.
MAX_JSON_DEPTH = 100


def _json_body(raw: bytes) -> object:
    """The decoded body, or None when it is not JSON (``parse_review`` then answers 400).

    Raises:
        MalformedReview: nested deeper than ``MAX_JSON_DEPTH`` (HTTP 400).
    """
    try:
        body = json.loads(raw)
    except RecursionError:
        raise MalformedReview(
            f"the request body is nested deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    except ValueError:
        return None
    if _too_deep(body, MAX_JSON_DEPTH):
        raise MalformedReview(f"the request body is nested deeper than {MAX_JSON_DEPTH} levels")
    return body


def _too_deep(obj: object, limit: int) -> bool:
    """True when ``obj`` nests lists/objects deeper than ``limit`` (iterative walk)."""
    stack: list[tuple[object, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _answer(
    admission: Admission,
    review: ReviewRequest,
    namespace_labels: Callable[[str], Mapping[str, str]] | None,
) -> dict[str, Any]:
    """The AdmissionReview response for a parsed request (never raises)."""

    def deny(code: int, message: str, reason: str) -> dict[str, Any]:
        return review_response(
            review.api_version,
            review.uid,
            allowed=False,
            code=code,
            message=message,
            reason=reason,
        )

    if review.is_pod_update:
        return _answer_update(admission, review, deny)
    if not review.is_pod_create:
        return review_response(review.api_version, review.uid, allowed=True)
    original = review.object
    if not isinstance(original, dict):
        return deny(400, "AdmissionReview.request.object must be a Pod object", "BadRequest")
    pod = copy.deepcopy(original)
    meta = pod.get("metadata")
    if meta is None:
        meta = pod["metadata"] = {}
    if not isinstance(meta, dict) or not isinstance(pod.get("spec", {}), dict):
        return deny(400, "the pod's metadata and spec must be objects", "BadRequest")
    # On CREATE the object may lack its namespace (the API server fills it later).
    if review.namespace and not meta.get("namespace"):
        meta["namespace"] = review.namespace
    where = f"pod {meta.get('namespace') or review.namespace}/{meta.get('name') or meta.get('generateName') or '?'}"

    labels: Mapping[str, str] | None = None
    lookup_error: Exception | None = None
    if namespace_labels is not None and review.namespace:
        try:
            labels = namespace_labels(review.namespace)
        except Exception as exc:
            lookup_error = exc
    try:
        result = admission.review(pod, namespace_labels=labels, user=review.username or None)
    except HamiError as exc:
        log.warning("review of %s (%s) failed: %s", where, review.uid, exc)
        return deny(exc.http_status, str(exc), type(exc).__name__)
    except Exception as exc:
        log.exception("review of %s (%s) failed", where, review.uid)
        return deny(500, f"{where}: internal error: {type(exc).__name__}: {exc}", "InternalError")

    if lookup_error is not None and result.mutated:
        log.warning("labels of namespace %s: %s", review.namespace, lookup_error)
        return deny(
            500,
            f"{where}: cannot read the labels of namespace {review.namespace!r} "
            f"(hami.io/webhook: ignore may apply): {lookup_error}",
            "InternalError",
        )
    if not result.allowed:
        log.info("denied %s (%s): %s", where, review.uid, result.message)
        return deny(DENIAL_CODES.get(result.reason, 403), result.message, result.reason)
    patch = _checked_patch(original, result)
    if isinstance(patch, str):
        log.error("%s (%s): %s", where, review.uid, patch)
        return deny(500, f"{where}: {patch}", "InternalError")
    if patch:
        log.info("mutated %s (%s): %d patch operations", where, review.uid, len(patch))
    return review_response(review.api_version, review.uid, allowed=True, patch=patch)


def _answer_update(
    admission: Admission, review: ReviewRequest, deny: Callable[[int, str, str], dict[str, Any]]
) -> dict[str, Any]:
    """An UPDATE of a pod (or its status): the trust check on scheduler-owned
    annotations; the ephemeral containers it adds are patched as ``review_update`` says."""
    new, old = review.object, review.old_object
    if not isinstance(new, dict) or not isinstance(old, dict):
        return deny(400, "a pod UPDATE needs request.object and request.oldObject", "BadRequest")
    try:
        result = admission.review_update(old, new, user=review.username or None)
    except Exception as exc:  # never a 500 trace; the API server applies failurePolicy
        log.exception("review of the update of pod %s/%s failed", review.namespace, review.name)
        return deny(500, f"internal error: {type(exc).__name__}: {exc}", "InternalError")
    if not result.allowed:
        log.warning(
            "denied update of pod %s/%s by %s: %s",
            review.namespace,
            review.name,
            review.username or "?",
            result.message,
        )
        return deny(DENIAL_CODES.get(result.reason, 403), result.message, result.reason)
    patch = _checked_patch(new, result)
    if isinstance(patch, str):
        log.error("update of pod %s/%s (%s): %s", review.namespace, review.name, review.uid, patch)
        return deny(500, patch, "InternalError")
    return review_response(review.api_version, review.uid, allowed=True, patch=patch)


def _checked_patch(original: dict[str, Any], result: AdmissionResult) -> list[dict[str, Any]] | str:
    """The patch, after proving it applies to the object the API server will patch;
    a message when it does not."""
    patch = [dict(op) for op in result.patch]
    if not patch:
        return patch
    try:
        apply_patch(original, patch)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        return f"internal error: the patch does not apply to the submitted pod: {exc}"
    return patch


class NamespaceLabels:
    """Namespace name -> labels, cached for ``ttl_s`` seconds (thread-safe).

    A namespace that does not exist has no labels. Errors of ``fetch`` propagate and
    are not cached.
    """

    def __init__(
        self,
        fetch: Callable[[str], Mapping[str, str]],
        *,
        ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        fetch: reads one namespace's labels (``kube_namespace_fetch`` in production);
            raises ``NotFoundError`` for a missing namespace.
        ttl_s: how long an answer is reused; a label change takes up to this long.
        clock: monotonic seconds (tests pass a fake).
        """
        self._fetch = fetch
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Mapping[str, str]]] = {}

    def __call__(self, namespace: str) -> Mapping[str, str]:
        """The labels of ``namespace``, from the cache when fresh."""
        now = self._clock()
        with self._lock:
            hit = self._cache.get(namespace)
            if hit is not None and hit[0] > now:
                return hit[1]
        try:
            labels = dict(self._fetch(namespace))
        except NotFoundError:
            labels = {}
        with self._lock:
            self._cache[namespace] = (now + self._ttl_s, labels)
        return labels


def kube_namespace_fetch(api_client: Any) -> Callable[[str], Mapping[str, str]]:
    """A ``fetch`` for ``NamespaceLabels`` that reads ``GET /api/v1/namespaces/{name}``.

    Args:
        api_client: a ``kubernetes.client.ApiClient``.

    The returned function raises ``NotFoundError`` for a missing namespace and the
    errors of ``hami_core.cluster.kube.call`` otherwise.
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import call

    core = k8s.CoreV1Api(api_client)

    def fetch(namespace: str) -> Mapping[str, str]:
        obj = call(f"namespace {namespace}", core.read_namespace, namespace)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    return fetch
