"""deploy/: the Kubernetes manifests and the Dockerfile, checked without a cluster or
docker (neither is available here): YAML parses, required fields, and the settings
they pass are settings binloop knows, consistent with each other."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from binloop.core.config import Config, env_name, load_config
from binloop.ops.cluster_spec import cluster_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
KNOWN_ENV = {env_name(f.name) for f in dataclasses.fields(Config)} | {"BINLOOP_CONFIG"}
KNOWN_ENV |= {name + "_FILE" for name in KNOWN_ENV}


def documents() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), path
            out[f"{doc['kind']}/{doc.get('metadata', {}).get('name', path.stem)}"] = doc
    return out


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    return documents()


def container(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    [main] = docs["StatefulSet/binloop"]["spec"]["template"]["spec"]["containers"]
    return dict(main)


def env_of(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(docs)["env"]}


def test_every_manifest_has_api_version_kind_and_name(docs: dict[str, dict[str, Any]]) -> None:
    assert {"ConfigMap/binloop-config", "Service/binloop-headless", "StatefulSet/binloop",
            "PersistentVolumeClaim/binloop-state", "Secret/binloop-nats",
            "NetworkPolicy/binloop", "Kustomization/kustomization"} <= set(docs)
    for doc in docs.values():
        assert doc["apiVersion"] and doc["kind"]
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"]
    listed = set(docs["Kustomization/kustomization"]["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_statefulset_is_a_cluster_behind_a_headless_service(
        docs: dict[str, dict[str, Any]]) -> None:
    sts, svc = docs["StatefulSet/binloop"], docs["Service/binloop-headless"]
    spec = sts["spec"]
    assert spec["serviceName"] == svc["metadata"]["name"]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    env = env_of(docs)
    assert int(env["BINLOOP_PROCESSES"]) == spec["replicas"]
    assert env["BINLOOP_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    ports = {p["name"]: p["containerPort"] for p in container(docs)["ports"]}
    # The address template names the pods of this StatefulSet on the headless service.
    expected = f"{sts['metadata']['name']}-{{i}}.{svc['metadata']['name']}:{ports['cluster']}"
    assert env["BINLOOP_ADDRESSES"] == expected
    # ... and resolves, for each pod, to a valid cluster place.
    for ordinal in range(spec["replicas"]):
        values = {k: v for k, v in env.items() if isinstance(v, str) and k != "BINLOOP_CONFIG"
                  and not k.endswith("_FILE")}
        values["BINLOOP_POD_NAME"] = f"{sts['metadata']['name']}-{ordinal}"
        place = cluster_spec(load_config({}, env=values))
        assert place is not None and place.process_id == ordinal
        assert place.addresses[ordinal].startswith(values["BINLOOP_POD_NAME"] + ".")
    service_ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert service_ports["cluster"] == ports["cluster"]


def test_every_setting_comes_by_env_and_names_a_known_setting(
        docs: dict[str, dict[str, Any]]) -> None:
    env = env_of(docs)
    unknown = {name for name in env if name not in KNOWN_ENV}
    assert not unknown, f"not binloop settings: {unknown}"
    # The NATS URL (it may hold credentials) comes from the secret as a file, not as env.
    assert "BINLOOP_NATS" not in env
    mounts = {m["name"]: m for m in container(docs)["volumeMounts"]}
    volumes = {v["name"]: v for v in docs["StatefulSet/binloop"]["spec"]["template"]["spec"][
        "volumes"]}
    secret_mount = mounts["nats-secret"]
    assert secret_mount["readOnly"] is True
    assert volumes["nats-secret"]["secret"]["secretName"] == "binloop-nats"
    key = Path(env["BINLOOP_NATS_FILE"]).relative_to(secret_mount["mountPath"]).as_posix()
    assert key in docs["Secret/binloop-nats"]["stringData"]
    assert not any("secretKeyRef" in str(v) for v in env.values())
    # every plain value parses as its setting
    load_config({}, env={k: v for k, v in env.items() if isinstance(v, str) and k in KNOWN_ENV
                         and k != "BINLOOP_CONFIG" and not k.endswith("_FILE")})


def test_volumes_hold_the_recovery_store_and_the_library(
        docs: dict[str, dict[str, Any]]) -> None:
    env = env_of(docs)
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    volumes = {v["name"]: v for v in docs["StatefulSet/binloop"]["spec"]["template"]["spec"][
        "volumes"]}
    assert set(mounts) <= set(volumes)
    state = mounts["state"]
    assert env["BINLOOP_RECOVERY_DIR"].startswith(state + "/")
    assert env["BINLOOP_LIBRARY"].startswith(state + "/")
    claim = volumes["state"]["persistentVolumeClaim"]["claimName"]
    pvc = docs[f"PersistentVolumeClaim/{claim}"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # every process reaches the store
    assert env["BINLOOP_CONFIG"].startswith(mounts["config"] + "/")
    config_map = docs[f"ConfigMap/{volumes['config']['configMap']['name']}"]
    assert Path(env["BINLOOP_CONFIG"]).name in config_map["data"]


def test_config_map_toml_is_a_valid_binloop_config(docs: dict[str, dict[str, Any]],
                                                    tmp_path: Path) -> None:
    text = docs["ConfigMap/binloop-config"]["data"]["binloop.toml"]
    assert tomllib.loads(text)["binloop"]["theta"] == 3
    toml = tmp_path / "binloop.toml"
    toml.write_text(text)
    config = load_config({}, env={}, config_file=toml)  # unknown keys would raise
    assert config.partitions >= int(env_of(docs)["BINLOOP_PROCESSES"]) * int(
        env_of(docs)["BINLOOP_WORKERS"])


def test_probes_hit_the_metrics_endpoint_and_resources_are_set(
        docs: dict[str, dict[str, Any]]) -> None:
    main = container(docs)
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports["metrics"] == int(env_of(docs)["BINLOOP_METRICS_PORT"])
    for probe in ("readinessProbe", "livenessProbe"):
        assert main[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(main["resources"][kind])
    annotations = docs["StatefulSet/binloop"]["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == ports["metrics"]
    pod = docs["StatefulSet/binloop"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 10001  # the image's user


def test_dockerfile_copies_what_the_package_needs() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {src for line in re.findall(r"^COPY (?!--)(.+?) \S+$", text, re.M)
              for src in line.split()}
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"][
        "include"]}
    assert packages | {"pyproject.toml", "README.md"} <= copied
    for src in copied:
        assert (ROOT / src).exists(), src
    assert "llm" in pyproject["project"]["optional-dependencies"]
    assert re.search(r'^ENTRYPOINT \[.*"binloop"\]', text, re.M)
    assert "useradd --create-home --uid 10001" in text
    exposed = {int(p) for p in re.findall(r"^EXPOSE (.+)$", text, re.M)[0].split()}
    assert exposed == {9100, 9999}


def test_network_policy_lets_the_cluster_and_prometheus_in(
        docs: dict[str, dict[str, Any]]) -> None:
    policy = docs["NetworkPolicy/binloop"]["spec"]
    labels = docs["StatefulSet/binloop"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"]: p["containerPort"] for p in container(docs)["ports"]}
    ingress = {port["port"] for rule in policy["ingress"] for port in rule["ports"]}
    egress = {port["port"] for rule in policy["egress"] for port in rule["ports"]}
    assert {ports["cluster"], ports["metrics"]} <= ingress
    assert {ports["cluster"], 53, 4222} <= egress
