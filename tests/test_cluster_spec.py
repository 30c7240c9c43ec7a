"""Cluster settings: addresses (list or template), process id (flag or pod ordinal)."""

from __future__ import annotations

import pytest

from binloop.core.config import load_config
from binloop.ops.cluster_spec import ClusterSpec, cluster_spec, expand_addresses, pod_ordinal


def spec(**settings: str) -> ClusterSpec | None:
    return cluster_spec(load_config(settings, env={}))


def test_no_addresses_is_no_cluster() -> None:
    assert spec() is None
    with pytest.raises(ValueError, match="--process-id needs"):
        spec(process_id="1")


def test_explicit_list_and_process_id() -> None:
    assert spec(addresses="h1:9999; h2:9999", process_id="1") == \
        ClusterSpec(1, ["h1:9999", "h2:9999"])
    # the same through the environment, as a StatefulSet would set it
    config = load_config({}, env={"BINLOOP_ADDRESSES": "a:1;b:2;c:3", "BINLOOP_PROCESS_ID": "2"})
    assert cluster_spec(config) == ClusterSpec(2, ["a:1", "b:2", "c:3"])


def test_template_and_pod_name_need_no_init_container() -> None:
    env = {"BINLOOP_ADDRESSES": "binloop-{i}.binloop-headless:9999", "BINLOOP_PROCESSES": "3",
           "BINLOOP_POD_NAME": "binloop-2"}
    assert cluster_spec(load_config({}, env=env)) == ClusterSpec(2, [
        "binloop-0.binloop-headless:9999", "binloop-1.binloop-headless:9999",
        "binloop-2.binloop-headless:9999"])
    # an explicit process id wins over the pod name
    assert spec(addresses="p-{i}:1", processes="2", pod_name="p-1", process_id="0") == \
        ClusterSpec(0, ["p-0:1", "p-1:1"])


@pytest.mark.parametrize(("name", "ordinal"), [("binloop-0", 0), ("binloop-12", 12),
                                               ("my-job-binloop-3", 3)])
def test_pod_ordinal(name: str, ordinal: int) -> None:
    assert pod_ordinal(name) == ordinal


@pytest.mark.parametrize(("settings", "message"), [
    ({"addresses": "a:1;b:1", "process_id": "2"}, "not below the 2 processes"),
    ({"addresses": "a:1;b:1"}, "needs --process-id"),
    ({"addresses": "a:1;b:1", "pod_name": "binloop"}, "does not end with -<ordinal>"),
    ({"addresses": "a:1;b:1", "processes": "3", "process_id": "0"}, "lists 2 processes"),
    ({"addresses": "a;b:1", "process_id": "0"}, "not host:port"),
    ({"addresses": "a:99999", "process_id": "0"}, "not host:port"),
    ({"addresses": "p-{i}:1", "processes": "2", "pod_name": "p-5"}, "not below"),
])
def test_bad_cluster_settings_are_clear_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(**settings)


def test_ipv6_addresses() -> None:
    assert expand_addresses("[::1]:9999;[::1]:9998", 1) == ["[::1]:9999", "[::1]:9998"]


def test_a_local_cluster_serves_metrics_on_consecutive_ports() -> None:
    from binloop.cli.commands.run import _process_config

    config = load_config({"metrics_port": "9100", "processes": "3"}, env={})
    assert [_process_config(config, i).metrics_port for i in range(3)] == [9100, 9101, 9102]
    assert _process_config(config, 1).to_env()["BINLOOP_METRICS_PORT"] == "9101"
    assert _process_config(config.replace(metrics_port=0), 1).metrics_port == 0
