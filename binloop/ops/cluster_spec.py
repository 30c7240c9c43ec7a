"""Which process of which cluster this `binloop run` is.

A cluster is a list of addresses `host:port`, one per process (the port is the one
Bytewax's processes talk on), and this process's index in it. Both come from
settings (`--addresses`, `--process-id`; `BINLOOP_ADDRESSES`, `BINLOOP_PROCESS_ID`),
so a Kubernetes StatefulSet needs no init container:

* `--addresses` is a `;`-separated list, or a template with `{i}` expanded for
  `i < --processes` (`binloop-{i}.binloop-headless:9999`);
* the process id, when unset, is the ordinal of `--pod-name` (`binloop-2` -> 2; set
  `BINLOOP_POD_NAME` from the pod's `metadata.name`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from binloop.core.config import Config

_ORDINAL = re.compile(r"-(\d+)$")
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:;\[\]]+):(\d{1,5})$")


@dataclass(frozen=True)
class ClusterSpec:
    process_id: int
    addresses: list[str]

    @property
    def processes(self) -> int:
        return len(self.addresses)


def pod_ordinal(pod_name: str) -> int:
    """The ordinal of a StatefulSet pod (`binloop-2` -> 2)."""
    match = _ORDINAL.search(pod_name.strip())
    if match is None:
        raise ValueError(f"pod name {pod_name!r} does not end with -<ordinal> "
                         "(a StatefulSet pod's name does)")
    return int(match.group(1))


def expand_addresses(text: str, processes: int) -> list[str]:
    """The address list of `--addresses` (a `;` list, or a `{i}` template)."""
    if "{i}" in text:
        addresses = [text.replace("{i}", str(i)) for i in range(processes)]
    else:
        addresses = [a.strip() for a in text.split(";") if a.strip()]
        if processes not in (1, len(addresses)):
            raise ValueError(f"--addresses lists {len(addresses)} processes but --processes is "
                             f"{processes}")
    for address in addresses:
        match = _ADDRESS.match(address)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise ValueError(f"cluster address {address!r} is not host:port")
    if not addresses:
        raise ValueError("--addresses is empty")
    return addresses


def cluster_spec(config: Config) -> ClusterSpec | None:
    """This process's place in a cluster of `binloop run` processes, or None when the
    job runs in this process alone (or as a local cluster it starts itself)."""
    if not config.addresses:
        if config.process_id is not None:
            raise ValueError("--process-id needs the cluster's --addresses")
        return None
    addresses = expand_addresses(config.addresses, config.processes)
    if config.process_id is not None:
        process_id = config.process_id
    elif config.pod_name:
        process_id = pod_ordinal(config.pod_name)
    else:
        raise ValueError("a process of a cluster needs --process-id (or --pod-name)")
    if process_id >= len(addresses):
        raise ValueError(f"process id {process_id} is not below the {len(addresses)} "
                         "processes of --addresses")
    return ClusterSpec(process_id, addresses)
