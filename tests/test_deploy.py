"""deploy/k8s and `make run`, checked offline (no cluster, no network).

* every manifest validates against the Kubernetes OpenAPI schema (kubernetes-validate,
  strict, schema version pinned below); a misspelt field is caught (the check can fail);
* checkov finds 0 failed checks, every skip carries a reason, and a deliberately insecure
  copy of the Deployment does fail (the scan can fail);
* the contract between the pieces: probes on /_stcore/health, resources that fit the memory
  budget, the image's uid, writable volumes for a read-only root, session affinity, the HPA,
  PDB and NetworkPolicy selecting the Deployment's pods, the GPU variant differing only where
  it should;
* `make run` listens on 127.0.0.1 unless ADDRESS says otherwise.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
# The schema the manifests are checked against: a version current clusters run (pinned so a
# new kubernetes-validate release cannot change the verdict silently).
K8S_SCHEMA = "1.33.0"
HEALTH = "/_stcore/health"
WARMED = 1.6  # GiB: a warmed server's peak RSS with 10 students on the real model (docs/deploy.md)
IMAGE_UID = 10001  # Dockerfile: useradd --uid 10001, USER 10001:10001
GIB = 1024**3


def _manifests() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def _load(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 1, f"{path}: one object per file"
    return docs[0]


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {str(p.relative_to(K8S)): d for p in _manifests() if (d := _load(p))["kind"] == kind}


def _quantity(q: str | int) -> float:
    """A Kubernetes quantity ("3Gi", "500m", "2", "2G") as a number."""
    s = str(q)
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": GIB, "Ti": 1024**4, "k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3}
    for suffix, mult in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    return float(s)


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


# --------------------------------------------------------------------------- schema
def test_every_manifest_is_valid_against_the_pinned_kubernetes_schema() -> None:
    paths = _manifests()
    kinds = sorted(_load(p)["kind"] for p in paths)
    assert kinds == ["Deployment", "Deployment", "HorizontalPodAutoscaler", "Namespace", "NetworkPolicy",
                     "PodDisruptionBudget", "Service"]
    for p in paths:
        kubernetes_validate.validate(_load(p), K8S_SCHEMA, strict=True)


def test_the_schema_check_catches_a_misspelt_and_a_mistyped_field() -> None:
    dep = _load(K8S / "deployment.yaml")
    typo = copy.deepcopy(dep)
    c = typo["spec"]["template"]["spec"]["containers"][0]
    c["readinesProbe"] = c.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, K8S_SCHEMA, strict=True)
    wrong_type = copy.deepcopy(dep)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, K8S_SCHEMA, strict=True)


def test_kustomizations_list_files_that_exist() -> None:
    for kust in K8S.rglob("kustomization.yaml"):
        spec = yaml.safe_load(kust.read_text())
        assert spec["kind"] == "Kustomization"
        for res in spec["resources"]:
            target = (kust.parent / res).resolve()
            assert target.is_file() or (target / "kustomization.yaml").is_file(), f"{kust}: {res}"
    listed = {(K8S / "common" / r).resolve() for r in yaml.safe_load((K8S / "common/kustomization.yaml")
                                                                      .read_text())["resources"]}
    assert listed == {p.resolve() for p in (K8S / "common").glob("*.yaml") if p.name != "kustomization.yaml"}


# --------------------------------------------------------------------------- checkov
def _checkov(directory: Path) -> dict[str, Any]:
    exe = Path(sys.executable).with_name("checkov")
    if not exe.exists():
        pytest.skip("checkov is not installed (pip install -r requirements-dev.txt)")
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    out = subprocess.run(
        [str(exe), "-d", str(directory), "--framework", "kubernetes", "--skip-download", "--quiet",
         "--compact", "-o", "json"],  # --quiet: only failed (and skipped) checks are listed
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def test_checkov_finds_nothing_and_catches_an_insecure_copy(tmp_path: Path) -> None:
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree)
    bad = _load(K8S / "deployment.yaml")
    pod = bad["spec"]["template"]["spec"]
    pod["containers"][0]["securityContext"].update(privileged=True, allowPrivilegeEscalation=True,
                                                   readOnlyRootFilesystem=False)
    pod["automountServiceAccountToken"] = True
    (tmp_path / "insecure").mkdir()
    (tmp_path / "insecure" / "deployment.yaml").write_text(yaml.safe_dump(bad))
    report = _checkov(tmp_path)
    summary = report["summary"]
    assert summary["parsing_errors"] == 0
    failed = report["results"]["failed_checks"]
    real_failures = [f for f in failed if not f["file_path"].startswith("/insecure/")]
    assert real_failures == [], [(f["check_id"], f["check_name"], f["file_path"]) for f in real_failures]
    caught = {f["check_id"] for f in failed}
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_38"} <= caught  # privileged, escalation,
    # read-only root, token mount
    assert summary["passed"] > 100  # it did look (179 passed for the real manifests alone)
    # A skip is allowed only with its reason, in place: "# checkov:skip=CKV_X: why".
    for skipped in report["results"].get("skipped_checks", []):
        comment = skipped.get("check_result", {}).get("suppress_comment", "")
        assert len(comment.strip()) > 20, f"{skipped['check_id']} skipped without a reason"
    for p in _manifests():
        for m in re.finditer(r"checkov:skip=([A-Z0-9_]+)(.*)", p.read_text()):
            assert len(m.group(2).strip(" :")) > 20, f"{p}: {m.group(1)} skipped without a reason"


# --------------------------------------------------------------------------- the contract
@pytest.fixture(scope="module")
def cpu() -> dict[str, Any]:
    return _load(K8S / "deployment.yaml")


@pytest.fixture(scope="module")
def gpu() -> dict[str, Any]:
    return _load(K8S / "gpu" / "deployment.yaml")


def test_probes_resources_and_the_memory_budget(cpu: dict[str, Any], gpu: dict[str, Any]) -> None:
    for dep in (cpu, gpu):
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        port = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert port == {"http": 8501}  # the Dockerfile's EXPOSE and --server.port
        for probe in ("startupProbe", "livenessProbe"):
            assert c[probe]["httpGet"] == {"path": HEALTH, "port": "http"}, probe
        # ready once warmed (issue 41 item 7a): serve.py writes the ready file (tests/test_warmup.py)
        assert c["readinessProbe"]["exec"]["command"] == ["test", "-f", _env(c)["ATTNLAB_READY_FILE"]]
        res = c["resources"]
        budget = _quantity(_env(c)["ATTNCORE_MAX_BYTES"])
        req, lim = _quantity(res["requests"]["memory"]), _quantity(res["limits"]["memory"])
        # two computations at the budget plus a warmed server (SmolLM2 loaded, the default views cached:
        # 1.6 GiB peak RSS with 10 students, bench.klass in docs/deploy.md) fit under the limit;
        # the request holds one computation plus the server
        assert budget >= 1.7e9  # the largest Heatmaps request (~1.65 GB) is allowed
        assert lim >= 2 * budget + WARMED * GIB and req >= budget + WARMED * GIB and req <= lim
        # admission control (ui.admission) keeps the sum of running estimates under ADMIT_BYTES,
        # which must leave the server's own ~1 GiB (idle + sessions) under the limit
        admit = _quantity(_env(c)["ATTNLAB_ADMIT_BYTES"])
        assert budget <= admit <= lim - 1 * GIB
        assert _env(c)["ATTNLAB_ADMIT_SLOTS"] == str(int(_quantity(res["limits"]["cpu"])))
        assert _quantity(res["requests"]["cpu"]) <= _quantity(res["limits"]["cpu"])
        assert _env(c)["OMP_NUM_THREADS"] == str(int(_quantity(res["limits"]["cpu"])))


def test_non_root_read_only_and_no_privileges(cpu: dict[str, Any]) -> None:
    pod = cpu["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == IMAGE_UID
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsUser"] == IMAGE_UID
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"USER {IMAGE_UID}:{IMAGE_UID}" in dockerfile and f"--uid {IMAGE_UID}" in dockerfile
    # every place the app writes is a writable emptyDir: HOME, the caches, TMPDIR
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    env = _env(c)
    for path in (env["HOME"], env["XDG_CACHE_HOME"], env["TMPDIR"]):
        assert path in mounts and "emptyDir" in vols[mounts[path]], path
        assert "sizeLimit" in vols[mounts[path]]["emptyDir"]
    # the image is pinned by digest (a placeholder that matches no image until replaced)
    assert re.fullmatch(r"[\w.\-/]+@sha256:[0-9a-f]{64}", c["image"])


def test_service_hpa_pdb_and_network_policy_select_the_pods(cpu: dict[str, Any]) -> None:
    labels = cpu["spec"]["template"]["metadata"]["labels"]
    assert cpu["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ns = cpu["metadata"]["namespace"]
    (svc,) = _by_kind("Service").values()
    assert svc["spec"]["selector"].items() <= labels.items() and svc["metadata"]["namespace"] == ns
    # a student's reconnect must reach the replica that holds their session
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    assert svc["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] >= 3600
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    (hpa,) = _by_kind("HorizontalPodAutoscaler").values()
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": cpu["metadata"]["name"]}
    assert 1 < hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    (pdb,) = _by_kind("PodDisruptionBudget").values()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (pol,) = _by_kind("NetworkPolicy").values()
    assert pol["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert pol["spec"]["egress"] == [] and set(pol["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert pol["spec"]["ingress"] == [{"ports": [{"port": 8501, "protocol": "TCP"}]}]
    assert {d["metadata"]["namespace"] for k in ("Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                                                  "NetworkPolicy") for d in _by_kind(k).values()} == {ns}


def test_the_gpu_variant_differs_only_in_gpu_image_and_device(cpu: dict[str, Any], gpu: dict[str, Any]) -> None:
    a, b = copy.deepcopy(cpu), copy.deepcopy(gpu)
    ca, cb = a["spec"]["template"]["spec"]["containers"][0], b["spec"]["template"]["spec"]["containers"][0]
    assert _env(ca)["ATTNCORE_DEVICE"] == "cpu" and _env(cb)["ATTNCORE_DEVICE"] == "cuda"
    assert cb["resources"]["limits"].pop("nvidia.com/gpu") == 1
    assert "cuda" in cb["image"] and "cuda" not in ca["image"]
    tol = b["spec"]["template"]["spec"].pop("tolerations")
    assert tol == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    for c in (ca, cb):
        c.pop("image")
        c["env"] = [e for e in c["env"] if e["name"] != "ATTNCORE_DEVICE"]
    assert a == b


# --------------------------------------------------------------------------- make run
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_listens_on_loopback_unless_told_otherwise() -> None:
    def cmd(*args: str) -> str:
        out = subprocess.run(["make", "-s", "-n", "run", *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=30, check=True).stdout
        (line,) = [ln for ln in out.splitlines() if "serve.py" in ln]  # streamlit run app.py, warmed
        return line

    assert "--server.address 127.0.0.1 " in cmd()
    assert "--server.address 0.0.0.0 " in cmd("ADDRESS=0.0.0.0")
    # the image serves every interface of its container (the port mapping decides who reaches it)
    assert "--server.address=0.0.0.0" in (ROOT / "Dockerfile").read_text()
