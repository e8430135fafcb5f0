"""The webhook server routes pod UPDATEs (and status updates) to the trust check with the
request's ``userInfo`` (issue #12 item 2)."""

import copy

from hami_core.servers.webhook import create_webhook_app
from hami_core.servers.webhook_main import WebhookOptions, trusted_users
from hami_core.webhook import Admission
from tests.builders import manager
from tests.servers.test_webhook import fixture, obj, pod_review, post

SCHED = "system:serviceaccount:hami-system:hami-scheduler"


def client():
    adm = Admission(manager(), trusted_users=frozenset({SCHED}))
    return create_webhook_app(adm).test_client()


def update(user, change, sub=""):
    body = fixture("v1-pod-update.json")
    req = body["request"]
    req["userInfo"] = {"username": user, "groups": ["system:authenticated"]}
    req["subResource"] = sub or None
    req["object"] = copy.deepcopy(req["oldObject"])
    change(req["object"]["metadata"].setdefault("annotations", {}))
    return body


def forge(ann):
    ann["hami.io/vgpu-devices-allocated"] = "GPU-A,NVIDIA,1,0:;"


def test_a_tenants_update_of_owned_annotations_is_denied():
    resp = post(client(), update("alice", forge))["response"]
    assert resp["allowed"] is False
    assert resp["status"]["reason"] == "SchedulerOwnedAnnotation"
    assert "alice" in resp["status"]["message"]


def test_the_status_subresource_is_checked_too():
    resp = post(client(), update("alice", forge, sub="status"))["response"]
    assert resp["allowed"] is False


def test_the_schedulers_update_and_harmless_updates_pass():
    assert post(client(), update(SCHED, forge))["response"]["allowed"] is True
    harmless = update("alice", lambda a: a.update(team="x"))
    assert post(client(), harmless)["response"] == {
        "uid": harmless["request"]["uid"],
        "allowed": True,
    }


def test_create_with_owned_annotations_by_a_tenant_is_denied():
    body = pod_review()
    body["request"]["userInfo"] = {"username": "alice"}
    obj(body)["spec"]["schedulerName"] = "volcano"
    obj(body)["metadata"].setdefault("annotations", {})["hami.io/bind-phase"] = "allocating"
    resp = post(client(), body)["response"]
    assert resp["allowed"] is False and resp["status"]["reason"] == "SchedulerOwnedAnnotation"


def test_an_update_without_old_object_is_a_bad_request():
    body = update("alice", forge)
    body["request"]["oldObject"] = None
    resp = post(client(), body)["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 400


def test_default_trusted_users_are_our_service_accounts():
    assert trusted_users(WebhookOptions(service_namespace="hami-system")) == {
        SCHED,
        "system:serviceaccount:hami-system:hami-device-plugin",
    }
    assert trusted_users(WebhookOptions(trusted_users=("u",))) == {"u"}
