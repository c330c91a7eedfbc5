"""The Helm chart: `helm lint --strict`, every render valid against the Kubernetes 1.37 schemas, the same
objects as the kustomize tree for the same settings (testbed.helm names the differences allowed), and its
values schema refusing what it does not know. `helm` is the real one (helm.sh/helm/v4, hack/build-go-tools).
"""

from __future__ import annotations

import pytest

from testbed import helm
from testbed.manifests import check, find

pytestmark = pytest.mark.integration


def test_the_chart_lints_strict() -> None:
    out = helm.run_helm("lint", "--strict", str(helm.CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.parametrize("setting", helm.SETTINGS, ids=[s.name for s in helm.SETTINGS])
def test_the_chart_renders_what_kustomize_renders(setting: helm.Setting) -> None:
    charted = check(helm.template(setting), f"helm template ({setting.name})")
    kustomized = helm.kustomize(setting)
    assert len(find(charted, "DaemonSet")) >= 1 and len(charted) == len(kustomized) - 1  # no Namespace
    assert helm.differences(kustomized, charted) == []


def test_a_difference_is_reported() -> None:
    setting = helm.SETTINGS[0]
    charted = helm.template(setting)
    find(charted, "DaemonSet", "nri-podlevel")[0]["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] = 1
    assert helm.differences(helm.kustomize(setting), charted) == [
        "DaemonSet nri-podlevel/nri-podlevel: .spec.updateStrategy.rollingUpdate.maxSurge: "
        "kustomize 0, helm 1"]


@pytest.mark.parametrize(("values", "named"), [
    ({"webhook": {"certificate": "vault"}}, "/webhook/certificate"),
    ({"agent": {"metricsPort": 70000}}, "/agent/metricsPort"),
    ({"pools": [{"name": "Bad_Name"}]}, "/pools/0/name"),
    ({"imag": {}}, "imag"),
])
def test_the_values_schema_refuses_unknown_values(values: dict[str, object], named: str) -> None:
    with pytest.raises(RuntimeError, match=named):
        helm.run_helm("template", "x", str(helm.CHART), values=values)
