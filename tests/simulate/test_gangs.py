"""``hami simulate`` shows gang groups placed or refused as a whole (issue 27 item 4),
through the servers' own gang stage."""

from hami_core.simulate.report import build_report, render_text

from .helpers import gpu_pod, run, simple_cluster


def members(n=4, group="train", minimum="4"):
    pods = []
    for i in range(n):
        p = gpu_pod(f"w{i}", annotations={"hami.io/gang-min-member": minimum}, gpu=2)
        p["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
        pods.append(p)
    return pods


def cluster(nodes):
    return simple_cluster(
        *(
            (f"n{i}", [{"model": "NVIDIA A100-PCIE-40GB", "memoryMiB": 40960, "count": 2}])
            for i in range(nodes)
        )
    )


def test_a_group_with_room_for_all_is_placed_as_a_whole():
    data = build_report(run(cluster(4), members()))
    assert [p["status"] for p in data["pods"]] == ["placed"] * 4
    assert len({p["node"] for p in data["pods"]}) == 4
    (group,) = data["groups"]
    assert group == {
        "group": "default/train",
        "minMember": 4,
        "members": ["default/w0", "default/w1", "default/w2", "default/w3"],
        "bound": 4,
        "status": "placed",
        "why": "",
    }
    assert "default/train: placed as a whole, 4 of minMember 4 bound" in render_text(data)


def test_a_group_with_room_for_three_is_refused_as_a_whole():
    data = build_report(run(cluster(3), members()))
    assert [p["status"] for p in data["pods"]] == ["unschedulable"] * 4
    (group,) = data["groups"]
    assert group["status"] == "refused" and group["bound"] == 0
    assert group["why"].startswith("GroupDoesNotFit (group default/train: 3 of the 4 members")
    text = render_text(data)
    assert "default/train: refused as a whole, 0 of minMember 4 bound: GroupDoesNotFit" in text
