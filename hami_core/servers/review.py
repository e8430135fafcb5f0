"""The AdmissionReview wire format (``admission.k8s.io/v1`` and ``v1beta1``), apart from
the views.

Source: Kubernetes API reference "kube-apiserver Admission (v1)" and "Dynamic Admission
Control". The request is ``{"apiVersion", "kind": "AdmissionReview", "request": {"uid",
"kind": GroupVersionKind, "resource": GroupVersionResource, "subResource", "namespace",
"name", "operation", "userInfo", "object", "oldObject", "dryRun", "options"}}``; the
response repeats ``apiVersion`` and ``kind`` and carries ``response: {"uid", "allowed",
"patchType": "JSONPatch", "patch": base64 of the JSON patch, "status": {"code",
"message", "reason"}}``. Both versions share this shape; the API server requires the
response in the version it sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from hami_core.errors import InvalidInputError

V1: Final = "admission.k8s.io/v1"
V1BETA1: Final = "admission.k8s.io/v1beta1"
SUPPORTED_VERSIONS: Final = (V1, V1BETA1)
KIND: Final = "AdmissionReview"


class MalformedReview(InvalidInputError):
    """The body is not a usable AdmissionReview.

    Attributes:
        api_version: the review's version when it is one we answer, else None.
        uid: ``request.uid`` when it was readable, else None. With both known the
            webhook answers an AdmissionReview that denies; otherwise an HTTP 400.
    """

    def __init__(self, message: str, *, api_version: str | None = None, uid: str | None = None):
        super().__init__(message)
        self.api_version = api_version
        self.uid = uid


@attrs.frozen(kw_only=True)
class ReviewRequest:
    """The parts of ``AdmissionReview.request`` the webhook uses.

    Attributes:
        api_version: ``admission.k8s.io/v1`` or ``admission.k8s.io/v1beta1``.
        uid: ``request.uid``, echoed in the response.
        operation: ``CREATE``, ``UPDATE``, ``DELETE`` or ``CONNECT``.
        group, version, kind: ``request.kind`` (``""``, ``v1``, ``Pod`` for pods).
        sub_resource: ``request.subResource`` (``""`` for the object itself).
        namespace: ``request.namespace`` (``""`` for cluster-scoped objects).
        name: ``request.name`` (``""`` on CREATE with ``generateName``).
        object: ``request.object`` (None for DELETE).
        old_object: ``request.oldObject`` (UPDATE and DELETE; None otherwise).
        username: ``request.userInfo.username``, the authenticated requester ("" when
            absent), e.g. ``system:serviceaccount:kube-system:hami-scheduler``.
        dry_run: ``request.dryRun``.
    """

    api_version: str
    uid: str
    operation: str
    group: str
    version: str
    kind: str
    sub_resource: str = ""
    namespace: str = ""
    name: str = ""
    object: Any = None
    old_object: Any = None
    username: str = ""
    dry_run: bool = False

    @property
    def is_pod_update(self) -> bool:
        """True for the UPDATE of a core/v1 Pod or of its ``status`` subresource (both
        can change annotations), or of its ``ephemeralcontainers`` (``kubectl debug``:
        kind ``Pod`` from Kubernetes 1.22, ``EphemeralContainers`` on 1.16-1.21)."""
        if self.operation != "UPDATE" or self.group != "":
            return False
        if self.sub_resource == "ephemeralcontainers":
            return self.kind in ("Pod", "EphemeralContainers")
        return self.kind == "Pod" and self.sub_resource in ("", "status")

    @property
    def is_pod_create(self) -> bool:
        """True for the CREATE of a core/v1 Pod itself (not a subresource)."""
        return (
            self.operation == "CREATE"
            and self.group == ""
            and self.kind == "Pod"
            and not self.sub_resource
        )


def _str(data: Mapping[str, Any], key: str, where: str, **known: Any) -> str:
    value = data.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedReview(
            f"{where}.{key} must be a string, got {type(value).__name__}", **known
        )
    return value


def _username(request: Mapping[str, Any], known: Mapping[str, Any]) -> str:
    info = request.get("userInfo")
    if info is None:
        return ""
    if not isinstance(info, dict):
        raise MalformedReview("AdmissionReview.request.userInfo must be an object", **known)
    return _str(info, "username", "request.userInfo", **known)


def parse_review(body: object) -> ReviewRequest:
    """Read an AdmissionReview request body (already JSON-decoded).

    Checks, in order: a JSON object; ``apiVersion`` one of ``SUPPORTED_VERSIONS``;
    ``kind: AdmissionReview``; ``request`` an object; ``request.uid`` a non-empty
    string; ``request.kind`` a GroupVersionKind; ``request.operation`` a string. The
    object is not checked here (only pod CREATEs need it).

    Raises:
        MalformedReview: the first check that fails; ``api_version`` / ``uid`` are set
            as far as they were read.
    """
    if not isinstance(body, dict):
        raise MalformedReview("the request body must be a JSON object (an AdmissionReview)")
    api_version = body.get("apiVersion")
    if api_version not in SUPPORTED_VERSIONS:
        raise MalformedReview(
            f"apiVersion {api_version!r} is not supported (expected one of "
            f"{', '.join(SUPPORTED_VERSIONS)})"
        )
    if body.get("kind") != KIND:
        raise MalformedReview(f"kind must be {KIND!r}, got {body.get('kind')!r}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("AdmissionReview.request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("AdmissionReview.request.uid is missing or not a string")
    known: dict[str, Any] = {"api_version": api_version, "uid": uid}
    gvk = request.get("kind")
    if not isinstance(gvk, dict) or not isinstance(gvk.get("kind"), str):
        raise MalformedReview(
            "AdmissionReview.request.kind must be a GroupVersionKind object", **known
        )
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        what = (
            "is missing" if not operation else f"must be a string, got {type(operation).__name__}"
        )
        raise MalformedReview(f"AdmissionReview.request.operation {what}", **known)
    return ReviewRequest(
        api_version=str(api_version),
        uid=uid,
        operation=operation,
        group=_str(gvk, "group", "request.kind", **known),
        version=_str(gvk, "version", "request.kind", **known),
        kind=gvk["kind"],
        sub_resource=_str(request, "subResource", "request", **known),
        namespace=_str(request, "namespace", "request", **known),
        name=_str(request, "name", "request", **known),
        object=request.get("object"),
        old_object=request.get("oldObject"),
        username=_username(request, known),
        dry_run=request.get("dryRun") is True,
    )


def review_response(
    api_version: str,
    uid: str,
    *,
    allowed: bool,
    patch: Sequence[Mapping[str, Any]] = (),
    code: int | None = None,
    message: str = "",
    reason: str = "",
) -> dict[str, Any]:
    """An AdmissionReview response body.

    Args:
        api_version: the request's ``apiVersion`` (answered in the same version).
        uid: the request's ``request.uid``.
        allowed: False denies.
        patch: RFC 6902 operations; when non-empty the response carries
            ``patchType: JSONPatch`` and ``patch`` (base64 of the compact JSON).
        code: HTTP-style status code of a denial (403 policy, 400 invalid input, 500
            internal); with ``message`` / ``reason`` it forms ``response.status``
            (a ``metav1.Status``, which the API server shows as
            ``admission webhook "..." denied the request: <message>``).
    """
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch:
        raw = json.dumps(list(patch), separators=(",", ":")).encode()
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(raw).decode("ascii")
    if not allowed or code is not None or message:
        status: dict[str, Any] = {"status": "Success" if allowed else "Failure"}
        if code is not None:
            status["code"] = code
        if message:
            status["message"] = message
        if reason:
            status["reason"] = reason
        response["status"] = status
    return {"apiVersion": api_version, "kind": KIND, "response": response}
