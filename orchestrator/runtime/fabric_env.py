"""What the startup script does for the node-to-node fabric the machine was launched on (``RenderInput.fabric``,
from ``Instance.fabric``; providers/fabric.py): NCCL's environment, the host steps before the job starts, and
what the job's container is given. Plain TCP (no fabric) gets none of it: NCCL_IB_DISABLE=1 and the socket
interface hint stay as render.py sets them.

* ``efa`` (AWS): NCCL through the aws-ofi-nccl plugin of AWS's deep learning images, with GPUDirect RDMA.
* ``infiniband`` / ``roce`` (Azure ND on the HPC image, hosts you own): NCCL's IB verbs transport, left on.
* ``efa``, ``infiniband``, ``roce``: the container gets the RDMA devices (``/dev/infiniband``), IPC_LOCK and an
  unlimited locked-memory limit (verbs pin memory), when the host has the devices.
* ``gpudirect-tcpx`` (GCP A3 High): Google's TCPX NCCL plugin is installed into /var/lib/tcpx/lib64 and its
  receive-datapath manager (RxDM) started, as Google's A3 guide and its cluster tooling do; NCCL's control
  traffic goes over the NIC of the default route and GPU traffic over the four others (found at boot: their
  names depend on the image), with the settings Google gives for A3 High. The plugin and RxDM are Google's
  public images (us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx); the job's container gets the plugin's
  library directory and RxDM's socket directory.
  https://cloud.google.com/compute/docs/gpus/gpudirect
"""

from __future__ import annotations

from providers.fabric import Fabric

__all__ = ["RDMA_FABRICS", "TCPX", "docker_args", "host_lines", "inner_lines", "nccl_env"]

TCPX = Fabric.GPUDIRECT_TCPX
RDMA_FABRICS = frozenset({Fabric.EFA, Fabric.INFINIBAND, Fabric.ROCE})
TCPX_LIB = "/var/lib/tcpx/lib64"
TCPX_UDS = "/run/tcpx"
TCPX_REGISTRY = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx"

#: Google's NCCL settings for GPUDirect-TCPX on A3 High (the a3 NCCL test scripts of its guide).
_TCPX_ENV = [
    ("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple"), ("NCCL_CROSS_NIC", "0"), ("NCCL_NSOCKS_PERTHREAD", "4"),
    ("NCCL_SOCKET_NTHREADS", "1"), ("NCCL_DYNAMIC_CHUNK_SIZE", "524288"), ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
    ("NCCL_P2P_PCI_CHUNKSIZE", "524288"), ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"), ("NCCL_BUFFSIZE", "4194304"),
    ("NCCL_NET_GDR_LEVEL", "PIX"), ("NCCL_P2P_PXN_LEVEL", "0"),
    ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", TCPX_UDS),
    ("NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS", "1000000"),
    ("NCCL_GPUDIRECTTCPX_FORCE_ACK", "0"), ("NCCL_GPUDIRECTTCPX_TX_COMPLETION_NANOSLEEP", "1000"),
]
#: Set from the NICs found at boot (host_lines): the control NIC and the four GPU NICs.
TCPX_NIC_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_GPUDIRECTTCPX_CTRL_DEV",
                "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME")


def nccl_env(fabric: Fabric | None) -> list[tuple[str, str]]:
    """The fixed NCCL settings for ``fabric`` (None, plain TCP, and the IB-verbs fabrics: none)."""
    if fabric is Fabric.EFA:
        return [("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1")]
    if fabric is TCPX:
        return list(_TCPX_ENV)
    return []


def host_lines(fabric: Fabric | None, *, user_env: frozenset[str] = frozenset()) -> list[str]:
    """Shell run on the host before the job: RDMA devices for the container; for TCPX the plugin, RxDM
    and the NIC names NCCL is pointed at (a name the manifest's env sets is left to it)."""
    lines: list[str] = []
    if fabric in RDMA_FABRICS:
        lines += ['ORCH_RDMA_ARGS=""',
                  "if [ -d /dev/infiniband ]; then "
                  'ORCH_RDMA_ARGS="--device=/dev/infiniband --cap-add=IPC_LOCK --ulimit memlock=-1"; fi']
    if fabric is TCPX:
        lines += [
            f"docker run --rm -v /var/lib:/var/lib {TCPX_REGISTRY}/nccl-plugin-gpudirecttcpx install --install-nccl",
            f"mkdir -p {TCPX_UDS}",
            "docker rm -f orch-tcpx-rxdm >/dev/null 2>&1 || true",
            "docker run --detach --name orch-tcpx-rxdm --privileged --cap-add=NET_ADMIN --network=host "
            f"--gpus all -v {TCPX_UDS}:{TCPX_UDS} --entrypoint /tcpgpudmarxd/build/app/tcpgpudmarxd "
            f"{TCPX_REGISTRY}/tcpgpudmarxd --gpu_nic_preset a3vm --gpu_shmem_type fd --uds_path {TCPX_UDS} "
            "--setup_param '--verbose 128 2 0'",
            # The control NIC carries the default route; the GPU NICs are the other addressed ones.
            "ORCH_CTRL_NIC=\"$(ip -o -4 route show to default | awk '{print $5; exit}')\"",
            "ORCH_GPU_NICS=\"$(ip -o -4 addr show | awk '{print $2}' | grep -v -x -e lo -e \"$ORCH_CTRL_NIC\" "
            "| grep -v '^docker' | awk '!seen[$0]++' | paste -sd, - || true)\"",
            # Without its GPU NICs the plugin cannot start: say why here rather than hang in NCCL's init.
            'if [ -z "$ORCH_CTRL_NIC" ] || [ -z "$ORCH_GPU_NICS" ]; then echo "orch: GPUDirect-TCPX: no control '
            'NIC or no GPU NIC found (is the VM launched with its GPU networks?)" >&2; exit 1; fi',
        ]
        nic = {"GLOO_SOCKET_IFNAME": "$ORCH_CTRL_NIC", "NCCL_SOCKET_IFNAME": "$ORCH_CTRL_NIC",
               "NCCL_GPUDIRECTTCPX_CTRL_DEV": "$ORCH_CTRL_NIC", "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "$ORCH_GPU_NICS"}
        lines += [f'export {k}="{v}"' for k, v in nic.items() if k not in user_env]
    return lines


def docker_args(fabric: Fabric | None) -> list[str]:
    """What the job's ``docker run`` adds for ``fabric`` (shell words; ``$ORCH_RDMA_ARGS`` splits on purpose)."""
    if fabric in RDMA_FABRICS:
        return ["$ORCH_RDMA_ARGS"]
    if fabric is TCPX:
        return [f"-v {TCPX_LIB}:{TCPX_LIB}", f"-v {TCPX_UDS}:{TCPX_UDS}"]
    return []


def inner_lines(fabric: Fabric | None) -> list[str]:
    """The first lines where the job runs (in its container or on the host): TCPX's NCCL and plugin first."""
    if fabric is TCPX:
        return [f'export LD_LIBRARY_PATH="{TCPX_LIB}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"']
    return []
