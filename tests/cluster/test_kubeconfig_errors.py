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
