"""Multi-process start-up (TPU pod slices, multi-node GPU, several CPU processes).

`initialize(mode, coordinator_address, num_processes, process_id)` is what the launchers
call before anything touches a device. What each environment exposes, and who reads it:

  * Cloud TPU VM pod slices (`gcloud ... tpu-vm ssh --worker=all`): the worker list and
    this worker's number come from the GCE metadata server; GKE TPU node pools set
    TPU_WORKER_HOSTNAMES / TPU_WORKER_ID; multislice adds MEGASCALE_* variables.
  * SLURM (`srun`): SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID.
  * Open MPI (`mpirun`): OMPI_MCA_orte_hnp_uri, OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK.
  * Kubernetes (GPU jobs): the pod's API, with `jax[k8s]` installed.
  * Anything else (torchrun-style launchers, hand-started processes, Open MPI 5): the
    explicit flags; "auto" refuses to start one of several processes it cannot join
    (WORLD_SIZE_VARIABLES above 1), which would otherwise train alone on a shared workdir.

jax reads all of these itself (its ClusterEnv classes), so this module only decides
*whether* to start jax.distributed: "auto" asks jax's own cluster detection whether an
environment with more than one process is present and never parses those variables;
"on" always starts it (the flags fill in what jax cannot detect); "off" never does.
On CPU the processes talk through gloo collectives: jax's default for
`jax_cpu_collectives_implementation` (checked in jax 0.10.2, the oldest this package allows).
"""

from __future__ import annotations

import collections
import logging
import os
import re
import socket
import time

import jax

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
COORDINATOR_WAIT_SECONDS = 300.0  # as long as jax.distributed's own initialization timeout
_WAITING_SAID_EVERY_SECONDS = 30.0
# What launchers jax does not detect set for each process (Open MPI 5 no longer sets the
# OMPI_MCA_orte_hnp_uri jax looks for; torchrun-style launchers; MPICH / Intel MPI).
WORLD_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")


JAX_INITIALIZATION_SECONDS = 300  # jax.distributed.initialize's own initialization_timeout


def wait_for_coordinator(address: str, process_id: int) -> None:
    """On a process other than 0: waits until the coordinator (process 0's) takes connections
    at `address`, saying so every 30 s; ValueError naming the address after
    COORDINATOR_WAIT_SECONDS. jax.distributed's own wait on a wrong address is silent, then a
    C++ abort that blames "another task", which no launcher can turn into one line. Anything
    that takes connections there passes (a service other than jax's then fails as before); a
    gRPC target with a scheme (dns:///host:port) is left to jax."""
    if is_grpc_target(address):
        return
    host, port = host_and_port(address)
    start = said = time.monotonic()
    while True:
        try:
            with socket.create_connection((host, port), timeout=5.0):
                return
        except OSError as e:
            waited = time.monotonic() - start
            if waited >= COORDINATOR_WAIT_SECONDS:
                raise ValueError(f"--coordinator_address={address}: process {process_id} found no coordinator there "
                                 f"in {waited:.0f}s ({type(e).__name__}: {e}); process 0 runs it: start process 0 with "
                                 "the same --coordinator_address, the address of its host") from None
            if time.monotonic() - said >= _WAITING_SAID_EVERY_SECONDS:
                said = time.monotonic()
                log.warning("process %d: waiting %.0fs for the coordinator at %s (process 0)", process_id, waited,
                            address)
            time.sleep(min(1.0, COORDINATOR_WAIT_SECONDS - waited))


def host_and_port(address: str) -> tuple[str, int]:
    """(host, port) of a --coordinator_address "host:port" ("[::1]:port" for IPv6: gRPC reads
    an unbracketed address of several colons as all host); ValueError for anything else (jax's
    own reading fails with an IndexError, a segmentation fault, or a silent wait on process 0)."""
    parsed = re.fullmatch(r"\[([^\[\]]+)\]:([0-9]{1,5})|([^:\[\]]+):([0-9]{1,5})", address)
    if parsed is None or not 0 < int(parsed.group(2) or parsed.group(4)) < 65536:
        raise ValueError(f"--coordinator_address={address!r}: expected host:port, the port in 1-65535")
    return parsed.group(1) or parsed.group(3), int(parsed.group(2) or parsed.group(4))


def is_grpc_target(address: str) -> bool:
    """Whether `address` names a gRPC target with a scheme (dns:///host:port, ipv4:1.2.3.4:port),
    which jax reads itself."""
    return re.match(r"(dns|ipv4|ipv6|unix|unix-abstract|vsock|xds):(?![0-9]+$)", address) is not None


def _check_process_flags(coordinator_address: str | None, num_processes: int | None, process_id: int | None) -> None:
    """ValueError for flags that no process could start with, before any process waits on them."""
    if coordinator_address is not None and not is_grpc_target(coordinator_address):
        host_and_port(coordinator_address)
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"--num_processes={num_processes}: expected the number of processes, 1 or more")
    if process_id is not None and (process_id < 0 or (num_processes is not None and process_id >= num_processes)):
        within = f"0 to {num_processes - 1} (--num_processes={num_processes})" if num_processes else "0 or more"
        raise ValueError(f"--process_id={process_id}: expected {within}")


def detect_cluster() -> type | None:
    """The cluster environment `jax.distributed.initialize()` would use, or None.

    The same choice as jax makes: its ClusterEnv classes in order, opt-in ones (mpi4py) left out.
    """
    try:
        from jax._src.clusters import ClusterEnv
        environments = ClusterEnv._cluster_types
    except (ImportError, AttributeError) as e:
        raise RuntimeError(f"--distributed=auto: this jax {jax.__version__} does not expose its cluster detection "
                           f"({e}); use --distributed=on (multi-process) or --distributed=off") from None
    return next((env for env in environments if not env.opt_in_only_method and env.is_env_present()), None)


def _no_cluster() -> bool:
    """Whether jax detects no cluster environment (False when it cannot tell)."""
    try:
        return detect_cluster() is None
    except (RuntimeError, KeyError, OSError, ValueError):
        return False


def initialize(mode: str = "auto", coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> bool:
    """Starts jax.distributed as `mode` (auto | on | off) says; returns whether it did.

    auto: when any flag is given, or when jax detects a cluster environment with more than
      one process (a single-host TPU VM or a one-task SLURM job stays single-process).
    on: always; flags left None are detected by jax.
    off: never; giving flags with it is an error.
    """
    if mode not in MODES:
        raise ValueError(f"--distributed must be one of {MODES}, got {mode!r}")
    flags = {"coordinator_address": coordinator_address, "num_processes": num_processes, "process_id": process_id}
    given = sorted(name for name, value in flags.items() if value is not None)
    if mode == "off":
        if given:
            raise ValueError(f"--distributed=off contradicts --{', --'.join(given)}")
        return False
    _check_process_flags(coordinator_address, num_processes, process_id)
    if mode == "auto" and not given:
        try:
            cluster = detect_cluster()
            processes = cluster.get_process_count() if cluster is not None else 1
        except (RuntimeError, KeyError, OSError, ValueError) as e:  # e.g. jax[k8s] outside a Kubernetes Job
            raise ValueError(f"--distributed=auto: detecting the cluster failed ({type(e).__name__}: {e}); give "
                             "--distributed=off for one process, or --distributed=on with --coordinator_address, "
                             "--num_processes and --process_id") from None
        launched = {name: os.environ[name] for name in WORLD_SIZE_VARIABLES
                    if os.environ.get(name, "").isdigit() and int(os.environ[name]) > 1}
        if processes < 2 and launched:  # each process would train alone, on the same workdir
            name, size = next(iter(launched.items()))
            raise ValueError(f"--distributed=auto: {name}={size} says this is one of {size} processes, but jax "
                             "detects no cluster it can start from; give --distributed=on with "
                             "--coordinator_address=host:port, --num_processes and --process_id (or "
                             "--distributed=off for independent runs)")
        if processes < 2:
            log.info("--distributed=auto: %s; running as one process",
                     f"{cluster.__name__} with one process" if cluster else "no multi-process cluster environment")
            return False
        log.info("--distributed=auto: %s with %d processes", cluster.__name__, processes)
        num_processes_known, process_id_known = processes, None
        try:  # (for the waiting line only; a TPU pod's asks the metadata server, jax asks again)
            process_id_known = cluster.get_process_id()
        except (RuntimeError, KeyError, OSError, ValueError):
            pass
    else:
        num_processes_known, process_id_known = num_processes, process_id
    if coordinator_address is not None and process_id:
        wait_for_coordinator(coordinator_address, process_id)
    if process_id_known == 0 and (num_processes_known or 0) > 1:  # jax waits for them in silence, then aborts in C++
        where = f" at {coordinator_address}" if coordinator_address else ""
        print(f"process 0: coordinating{where}; waiting for the other {num_processes_known - 1} process(es) to join "
              f"(jax ends the run after {JAX_INITIALIZATION_SECONDS} s without them)", flush=True)
    try:
        jax.distributed.initialize(**flags)
    except ValueError as e:  # jax: "coordinator_address should be defined." and the like
        missing = [f"--{name}" + ("=host:port" if name == "coordinator_address" else "")
                   for name, value in flags.items() if value is None]
        listed = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
        hint = (f". No cluster environment (Cloud TPU pod slice, SLURM, Open MPI, Kubernetes) was detected: pass "
                f"{listed}" if missing and _no_cluster() else "")
        raise ValueError(f"--distributed={mode}: jax.distributed could not start ({e}){hint}") from None
    # (a mesh gives each process an equal share: else 'cannot reshape array of size 3 into shape (2,1)')
    counts = collections.Counter(device.process_index for device in jax.devices())
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"process {process}: {count}" for process, count in sorted(counts.items()))
        raise ValueError(f"the processes have other numbers of devices ({listed}); give every host the same "
                         "devices (XLA_FLAGS' device count, CUDA_VISIBLE_DEVICES)")
    return True
