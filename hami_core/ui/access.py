"""Who may see what, as kubernetes-dashboard decides it: the viewer's bearer token is
checked by the API server (``TokenReview``, ``authentication.k8s.io/v1``) and the page
shows only the namespaces the viewer may ``list pods`` in (``SubjectAccessReview``,
``authorization.k8s.io/v1``; one cluster-wide review first, then one per namespace).

Those two ``create`` calls are the only writes the web view's client makes, and they
change nothing: the API server answers them without storing them. Answers are kept for
``ttl_s`` (a revoked token or role binding takes that long to bite), keyed by a hash of
the token, never the token itself; at most ``MAX_ENTRIES`` of each are kept.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

from hami_core.errors import HamiError

#: Bytes of a bearer token accepted at most (ServiceAccount tokens are ~1 KiB; OIDC
#: tokens a few): longer ones are refused without asking the API server.
MAX_TOKEN_BYTES = 16 * 1024
#: Answers of each kind kept at most; the cache is emptied when full.
MAX_ENTRIES = 4096


class Refused(Exception):
    """The request is refused.

    Attributes:
        status: 401 (no or a bad token) or 403 (rights to no namespace shown).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen(kw_only=True)
class User:
    """An authenticated user as ``TokenReview.status.user`` names it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Viewer:
    """Who is looking: ``user`` None when no token is asked for (loopback), and the
    namespaces they may see (None: all)."""

    user: User | None
    namespaces: frozenset[str] | None


class Reviews(Protocol):
    """The API server's answers (``KubeReviews``; a fake in the unit tests)."""

    def authenticate(self, token: str) -> User | None:
        """The token's user, or None when the API server does not accept it.

        Raises:
            HamiError: the API server cannot be asked.
        """

    def may_list_pods(self, user: User, namespace: str | None) -> bool:
        """Whether ``user`` may list pods in ``namespace`` (None: in every namespace).

        Raises:
            HamiError: the API server cannot be asked.
        """


class KubeReviews:
    """``Reviews`` from the API server (the kubeconfig's or the in-cluster identity,
    which needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews``)."""

    def __init__(self, kubeconfig: str | None, *, timeout_s: float = 5.0) -> None:
        from kubernetes import client as k8s

        from hami_core.cluster.kube import make_api_client

        api = make_api_client(kubeconfig)
        self._authn = k8s.AuthenticationV1Api(api)
        self._authz = k8s.AuthorizationV1Api(api)
        self._timeout_s = timeout_s

    def authenticate(self, token: str) -> User | None:
        from hami_core.cluster.kube import call

        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        got = call(
            "create tokenreview",
            self._authn.create_token_review,
            body,
            _request_timeout=self._timeout_s,
        )
        status = got.get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            return None
        extra = user.get("extra") or {}
        return User(
            name=str(user["username"]),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra={str(k): tuple(str(x) for x in v or ()) for k, v in extra.items()},
        )

    def may_list_pods(self, user: User, namespace: str | None) -> bool:
        from hami_core.cluster.kube import call

        attributes: dict[str, Any] = {"verb": "list", "resource": "pods", "version": "v1"}
        if namespace is not None:
            attributes["namespace"] = namespace
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.name,
                "uid": user.uid,
                "groups": list(user.groups),
                "extra": {k: list(v) for k, v in user.extra.items()},
                "resourceAttributes": attributes,
            },
        }
        got = call(
            "create subjectaccessreview",
            self._authz.create_subject_access_review,
            body,
            _request_timeout=self._timeout_s,
        )
        return bool((got.get("status") or {}).get("allowed"))


class Gate:
    """Decides each request's viewer.

    With ``require_token`` False (the server listens on loopback only: whoever reaches
    it can already use the kubeconfig it runs with, as with ``kubectl proxy``) everyone
    sees everything. Otherwise a request must carry ``Authorization: Bearer <token>``.
    """

    def __init__(
        self, *, require_token: bool, reviews: Reviews | None, ttl_s: float = 30.0
    ) -> None:
        """Raises ValueError: a token is required but no ``reviews`` given."""
        if require_token and reviews is None:
            raise ValueError("a token is required, so the API server's reviews are needed")
        self.require_token = require_token
        self._reviews = reviews
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._users: dict[str, tuple[float, User | None]] = {}
        self._rights: dict[tuple[str, str | None], tuple[float, bool]] = {}

    def viewer(self, authorization: str | None, namespaces: Iterable[str]) -> Viewer:
        """The viewer of a request with this ``Authorization`` header, and which of
        ``namespaces`` (those the page names) they may see.

        Raises:
            Refused: 401 with no token, a malformed header or a token the API server does
                not accept; 403 when the viewer may see none of ``namespaces`` (and not
                every namespace); 503 when the API server cannot be asked.
        """
        if not self.require_token:
            return Viewer(user=None, namespaces=None)
        assert self._reviews is not None
        token = _bearer(authorization)
        try:
            user = self._cached_user(token)
            if user is None:
                raise Refused(401, "the API server does not accept this token")
            if self._may(user, None):
                return Viewer(user=user, namespaces=None)
            allowed = frozenset(ns for ns in sorted(set(namespaces)) if self._may(user, ns))
        except HamiError as exc:
            raise Refused(503, f"cannot ask the API server: {exc}") from None
        if not allowed:
            raise Refused(403, f"{user.name} may list pods in none of the namespaces shown here")
        return Viewer(user=user, namespaces=allowed)

    def _cached_user(self, token: str) -> User | None:
        assert self._reviews is not None
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            hit = self._users.get(key)
        if hit is not None and now - hit[0] < self._ttl_s:
            return hit[1]
        user = self._reviews.authenticate(token)
        with self._lock:
            if len(self._users) >= MAX_ENTRIES:
                self._users.clear()
            self._users[key] = (now, user)
        return user

    def _may(self, user: User, namespace: str | None) -> bool:
        assert self._reviews is not None
        key = (_user_key(user), namespace)
        now = time.monotonic()
        with self._lock:
            hit = self._rights.get(key)
        if hit is not None and now - hit[0] < self._ttl_s:
            return hit[1]
        allowed = self._reviews.may_list_pods(user, namespace)
        with self._lock:
            if len(self._rights) >= MAX_ENTRIES:
                self._rights.clear()
            self._rights[key] = (now, allowed)
        return allowed


def _user_key(user: User) -> str:
    """Everything authorization reads of ``user``, as one string."""
    parts = [user.name, user.uid, *sorted(user.groups)]
    parts += [f"{k}={','.join(v)}" for k, v in sorted(user.extra.items())]
    return "\x00".join(parts)


def _bearer(authorization: str | None) -> str:
    """The token of ``Bearer <token>``.

    Raises:
        Refused: 401, the header is missing, not a bearer token, or too long.
    """
    if not authorization:
        raise Refused(401, "a bearer token is needed (Authorization: Bearer <token>)")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise Refused(401, "the Authorization header is not 'Bearer <token>'")
    if len(token.encode()) > MAX_TOKEN_BYTES:
        raise Refused(401, f"the token is longer than {MAX_TOKEN_BYTES} bytes")
    return token
