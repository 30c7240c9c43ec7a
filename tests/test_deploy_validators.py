"""deploy/ checked by real validators (issue 11, point 4): kubernetes-validate (every
resource against the Kubernetes 1.31 schemas, strict) and checkov (`-d deploy/`: the
manifests, the kustomization and the Dockerfile). CI fails on any new finding: a
finding is either fixed or skipped beside the resource with its reason, and the set of
skips is pinned here, so a new skip is a reviewed change too.

The validators live in their own virtualenv (~/.cache/binloop/deploy-validators, or
$BINLOOP_DEPLOY_VALIDATORS): checkov pins dozens of packages that must not decide
binloop's own dependency versions. Versions are pinned so that CI's verdict changes
only with the manifests. The commands (also in docs/deploy.md)::

    python3 -m venv ~/.cache/binloop/deploy-validators
    ~/.cache/binloop/deploy-validators/bin/pip install kubernetes-validate==1.37.0 \\
        checkov==3.3.30
    ~/.cache/binloop/deploy-validators/bin/kubernetes-validate -k 1.31.0 --strict \\
        $(ls deploy/k8s/*.yaml | grep -v kustomization)
    BC_SKIP_MAPPING=TRUE ~/.cache/binloop/deploy-validators/bin/checkov -d deploy/ \\
        --skip-download --compact
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
PINS = ("kubernetes-validate==1.37.0", "checkov==3.3.30")
KUBERNETES = "1.31.0"
# Every skip, with where its reason is written.
JUSTIFIED_SKIPS = {"CKV_K8S_43", "CKV_K8S_31"}  # deploy/k8s/statefulset.yaml annotations
FRAMEWORKS = {"kubernetes", "dockerfile", "kustomize"}
# checkov must not phone home (Prisma Cloud guidelines): no network but loopback here.
OFFLINE_ENV = {"BC_SKIP_MAPPING": "TRUE", "CHECKOV_SKIP_VERSION_CHECK": "TRUE"}

pytestmark = pytest.mark.slow


def validators() -> Path:
    """The bin directory of a virtualenv with the pinned validators (made once)."""
    home = Path(os.environ.get("BINLOOP_DEPLOY_VALIDATORS",
                               Path.home() / ".cache" / "binloop" / "deploy-validators"))
    bin_dir = home / "bin"
    if not (bin_dir / "checkov").exists() or not (bin_dir / "kubernetes-validate").exists():
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, timeout=300)
        subprocess.run([str(bin_dir / "pip"), "install", "-q", *PINS], check=True, timeout=1800)
    return bin_dir


def resources() -> list[Path]:
    return [p for p in sorted((DEPLOY / "k8s").glob("*.yaml")) if p.name != "kustomization.yaml"]


def checkov(directory: Path) -> list[dict[str, Any]]:
    run = subprocess.run([str(validators() / "checkov"), "-d", str(directory), "--skip-download",
                          "-o", "json"], capture_output=True, timeout=900,
                         env={**os.environ, **OFFLINE_ENV}, check=False)
    assert run.returncode in (0, 1), run.stderr.decode()[-3000:]  # 0 clean, 1 findings
    report = orjson.loads(run.stdout)
    return report if isinstance(report, list) else [report]


def findings(reports: list[dict[str, Any]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for report in reports:
        results = report.get("results", {})
        for kind in ("failed_checks", "skipped_checks"):
            for item in results.get(kind, []):
                out.setdefault(kind, set()).add(item["check_id"])
    return out


def test_every_resource_is_valid_kubernetes_1_31() -> None:
    files = resources()
    assert len(files) == 7
    run = subprocess.run([str(validators() / "kubernetes-validate"), "-k", KUBERNETES,
                          "--strict", *map(str, files)], capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    passed = [line for line in run.stdout.splitlines() if " passed for resource " in line]
    assert len(passed) == len(files), run.stdout


def test_checkov_finds_nothing_but_the_justified_skips() -> None:
    reports = checkov(DEPLOY)
    assert {r["check_type"] for r in reports} == FRAMEWORKS
    for report in reports:
        summary = report["summary"]
        assert summary["failed"] == 0 and summary["parsing_errors"] == 0, (
            report["check_type"], findings([report]))
        assert summary["passed"] > 0
    assert findings(reports).get("skipped_checks", set()) == JUSTIFIED_SKIPS
    text = (DEPLOY / "k8s" / "statefulset.yaml").read_text()
    for check in JUSTIFIED_SKIPS:
        reason = text.split(f"{check}=", 1)[1].split("checkov.io", 1)[0]
        assert len(reason.split()) >= 10, f"{check} needs a reason beside it"


def test_the_gate_fails_on_a_regression(tmp_path: Path) -> None:
    """The same check on a copy where the pod mounts a service-account token again,
    uses the default namespace and the Dockerfile lost its HEALTHCHECK: it fails."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    sts = copy / "k8s" / "statefulset.yaml"
    sts.write_text(sts.read_text().replace("automountServiceAccountToken: false",
                                           "automountServiceAccountToken: true"))
    service = copy / "k8s" / "service.yaml"
    service.write_text(service.read_text().replace("  namespace: binloop\n", ""))
    dockerfile = copy / "Dockerfile"
    dockerfile.write_text("\n".join(line for line in dockerfile.read_text().splitlines()
                                    if not line.startswith(("HEALTHCHECK", "    CMD"))))
    failed = findings(checkov(copy)).get("failed_checks", set())
    assert {"CKV_K8S_38", "CKV_K8S_21", "CKV_DOCKER_2"} <= failed
