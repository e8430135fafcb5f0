"""A kubeconfig that is not one stops every server command and ``hami top`` with the
file named (the kubernetes client indexes the parsed YAML as it goes, so a file that
parses to a list or a string raised a TypeError traceback from inside it)."""

import pytest

from hami_core.cluster.kube import make_api_client
from hami_core.errors import HamiError


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("just a string\n", "not a kubeconfig file"),
        ("- 1\n- 2\n", "not a kubeconfig file"),
        ("a: [\n", "not a kubeconfig file (line 2, column 1"),
        ("apiVersion: v1\nkind: Config\n", "current-context"),
    ],
)
def test_a_file_that_is_not_a_kubeconfig_is_named(tmp_path, text, says):
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(HamiError) as exc:
        make_api_client(str(path))
    assert str(path) in str(exc.value) or "kubeconfig" in str(exc.value)
    assert says in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("missing", "no such file (--kubeconfig / KUBECONFIG)"),
        ("a:b", "none of these files exists (--kubeconfig / KUBECONFIG)"),
    ],
)
def test_a_kubeconfig_that_does_not_exist_is_named(tmp_path, name, says):
    """The client skips missing files and says only "No configuration found"."""
    paths = ":".join(str(tmp_path / n) for n in name.split(":"))
    with pytest.raises(HamiError) as exc:
        make_api_client(paths)
    assert str(exc.value) == f"no Kubernetes configuration: {paths}: {says}"


def test_a_path_list_with_one_existing_file_reads_that_file(tmp_path):
    good = tmp_path / "kubeconfig"
    good.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(HamiError) as exc:  # read (it has no current-context), not "missing"
        make_api_client(f"{tmp_path / 'missing'}:{good}")
    assert "current-context" in str(exc.value)


def test_no_kubeconfig_outside_a_cluster_says_what_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(HamiError) as exc:
        make_api_client(None)
    assert str(exc.value) == (
        "no Kubernetes configuration: not in a cluster (KUBERNETES_SERVICE_HOST unset) and "
        f"{tmp_path}/.kube/config does not exist; pass --kubeconfig or set KUBECONFIG"
    )
