"""Device mesh and logical axis rules: the only place they live.

Every parameter and key activation in bertjax is annotated with *logical* axis
names (`nn.with_logical_partitioning`, `nn.with_logical_constraint`). This module
maps those names onto the physical mesh axes ``('data', 'fsdp', 'tensor')``:

* ``data``   -- pure data parallelism: parameters replicated, batch split.
* ``fsdp``   -- batch split *and* parameters/optimizer state split (ZeRO-3 style).
* ``tensor`` -- Megatron-style tensor parallelism over heads, MLP and vocabulary.

A dimension whose size the mesh axis does not divide is left replicated (jax
arrays must split evenly), so e.g. BERT's 30522-token vocabulary still works on a
4-way tensor axis.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")
log = logging.getLogger(__name__)

class Axis:
    """The logical axis names: the model and heads name their arrays' axes with these, never with
    string literals, so a misspelt name fails at import instead of being silently replicated."""

    # Parameters.
    VOCAB = "vocab"            # embedding table rows: word pieces
    POSITION = "position"      # embedding table rows: positions
    TOKEN_TYPE = "token_type"  # embedding table rows: segments
    EMBED = "embed"            # the hidden size H
    HEADS = "heads"            # attention projections' output features (H = heads x head_dim)
    MLP = "mlp"                # feed-forward / head hidden features
    CLASSES = "classes"        # task-head outputs (few, never split)
    LAYERS = "layers"          # the stacked layer axis when scanning over layers
    # Activations.
    ACT_BATCH = "act_batch"
    ACT_LENGTH = "act_length"
    ACT_EMBED = "act_embed"
    ACT_HEADS = "act_heads"
    ACT_MLP = "act_mlp"
    ACT_VOCAB = "act_vocab"
    ACT_KV = "act_kv"          # one head's features


# Logical axis name -> mesh axis (or tuple of mesh axes, or None = replicated).
LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    (Axis.VOCAB, "tensor"),
    (Axis.POSITION, None),
    (Axis.TOKEN_TYPE, None),
    (Axis.EMBED, "fsdp"),
    (Axis.HEADS, "tensor"),
    (Axis.MLP, "tensor"),
    (Axis.CLASSES, None),
    (Axis.LAYERS, None),
    (Axis.ACT_BATCH, ("data", "fsdp")),
    (Axis.ACT_LENGTH, None),
    (Axis.ACT_EMBED, None),
    (Axis.ACT_HEADS, "tensor"),
    (Axis.ACT_MLP, "tensor"),
    (Axis.ACT_VOCAB, "tensor"),
    (Axis.ACT_KV, None),
)
_KNOWN_AXES = frozenset(name for name, _ in LOGICAL_AXIS_RULES)


def check_axis_names(names: Sequence[str | None]) -> None:
    """Raises ValueError for a logical name the rules do not know (Flax would replicate it)."""
    unknown = [name for name in names if name is not None and name not in _KNOWN_AXES]
    if unknown:
        raise ValueError(f"unknown logical axis name(s) {unknown} in {tuple(names)}; "
                         f"sharding.LOGICAL_AXIS_RULES knows {sorted(_KNOWN_AXES)}")


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
    """`nn.with_logical_constraint` with the names checked against the rules."""
    check_axis_names(names)
    return nn.with_logical_constraint(x, tuple(names))


def mesh_shape(num_devices: int, data: int = -1, fsdp: int = 1, tensor: int = 1) -> tuple[int, int, int]:
    """Resolves one -1 entry ("the rest") and checks the product equals num_devices."""
    sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
    unknown = [name for name, size in sizes.items() if size == -1]
    if len(unknown) > 1:
        raise ValueError(f"config.mesh: at most one of data/fsdp/tensor may be -1, got {sizes}")
    for name, size in sizes.items():
        if size != -1 and (not isinstance(size, int) or size < 1):
            raise ValueError(f"config.mesh.{name} must be a positive int or -1, got {size!r}")
    known = math.prod(size for size in sizes.values() if size != -1)
    if unknown:
        if num_devices % known:
            raise ValueError(f"config.mesh: {num_devices} devices are not divisible by the fixed axes {sizes}")
        sizes[unknown[0]] = num_devices // known
    if math.prod(sizes.values()) != num_devices:
        there = "there is 1 device" if num_devices == 1 else f"there are {num_devices} devices"
        raise ValueError(f"config.mesh: data*fsdp*tensor = {math.prod(sizes.values())} but {there} ({sizes})")
    return sizes["data"], sizes["fsdp"], sizes["tensor"]


def check_training_mesh(shape: tuple[int, int, int]) -> None:
    """ValueError for a training mesh with data, fsdp and tensor all above 1: XLA's partitioner
    (jax 0.10.2, Shardy and GSPMD alike) gives wrong gradients through the word-embedding lookup
    on such meshes for some batch shapes (pre-training at batch 16 on 2 x 2 x 2: encoder kernels'
    gradients off by up to their size; a 20-line pure-JAX case in the docs), with no error. Any
    two of the axes compute what one device does."""
    if min(shape) > 1:
        data, fsdp, tensor = shape
        raise ValueError(f"config.mesh: data={data}, fsdp={fsdp} and tensor={tensor} all above 1 train on wrong "
                         "gradients (an XLA partitioner fault: docs/scaling-and-tpus.md); use two of the axes, e.g. "
                         f"config.mesh.data=1, fsdp={data * fsdp}, tensor={tensor}")


def create_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """Builds the ('data', 'fsdp', 'tensor') mesh over all (or the given) devices."""
    devices = list(jax.devices() if devices is None else devices)
    return Mesh(device_grid(mesh_shape(len(devices), data, fsdp, tensor), devices), MESH_AXES,
                axis_types=(AxisType.Auto,) * len(MESH_AXES))


def device_grid(shape: tuple[int, int, int], devices: Sequence[Any]) -> np.ndarray:
    """The devices as a [data, fsdp, tensor] array: in the slice's topology-aware order, unless
    that lays a tensor group over two processes (on a TPU pod the chip network's order can put a
    row of chips that crosses hosts on the tensor axis), where each process would hold another's
    batch rows too (pre-training's host_split='files' refuses that); then in process order, which
    keeps each tensor group on one host."""
    def groups_on_one_host(grid: np.ndarray) -> bool:
        return all(len({device.process_index for device in group}) == 1 for group in grid.reshape(-1, shape[2]))

    try:  # topology-aware order on TPU slices
        grid = mesh_utils.create_device_mesh(shape, devices)
    except (ValueError, NotImplementedError, AssertionError):
        grid = np.asarray(devices).reshape(shape)
    if groups_on_one_host(grid):
        return grid
    by_process = np.asarray(sorted(devices, key=lambda device: (device.process_index, device.id))).reshape(shape)
    if groups_on_one_host(by_process):
        log.info("mesh %s: the topology's device order puts tensor groups across hosts; in host order instead", shape)
        return by_process
    return grid  # a tensor group larger than a host's devices: across hosts whatever the order


def data_parallel_size(mesh: Mesh) -> int:
    """How many ways the batch is split (data x fsdp)."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def logical_to_spec(logical_axes: Sequence[str | None], shape: Sequence[int] | None = None, mesh: Mesh | None = None) -> PartitionSpec:
    """Maps logical names to a PartitionSpec; with shape+mesh, drops mesh axes that do not divide."""
    check_axis_names(logical_axes)
    spec = nn.logical_to_mesh_axes(tuple(logical_axes), LOGICAL_AXIS_RULES)
    if shape is None or mesh is None:
        return spec
    return PartitionSpec(*(entry if dim % size == 0 else None for dim, entry, size in _asked(spec, shape, mesh)))


def _asked(spec: PartitionSpec, shape: Sequence[int], mesh: Mesh) -> list[tuple[int, Any, int]]:
    """(dimension, the mesh axes `spec` asks for it, their size) for each dimension of `shape`."""
    entries = tuple(spec) + (None,) * (len(shape) - len(spec))
    sized = lambda entry: math.prod(mesh.shape[axis] for axis in (  # noqa: E731
        () if entry is None else entry if isinstance(entry, tuple) else (entry,)))
    return [(dim, entry, sized(entry)) for dim, entry in zip(shape, entries)]


def logical_shardings(abstract_tree: Any, mesh: Mesh) -> Any:
    """NamedShardings for a tree of `nn.LogicallyPartitioned` (or plain) abstract values.

    Plain leaves (no logical names, e.g. a step counter) are replicated.
    """

    def to_sharding(leaf):
        if isinstance(leaf, nn.LogicallyPartitioned):
            spec = logical_to_spec(leaf.names, leaf.value.shape, mesh)
        else:
            spec = PartitionSpec()
        return NamedSharding(mesh, spec)

    return jax.tree_util.tree_map(to_sharding, abstract_tree, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))


def undivided(abstract_tree: Any, mesh: Mesh) -> list[str]:
    """'path: dim i (n) whole, not over <axes> (k)' for each dimension of a tree of
    `nn.LogicallyPartitioned` leaves whose logical name asks for mesh axes of size k > 1 that do
    not divide it: `logical_to_spec` leaves it whole on every device (a vocabulary of 30,522 over
    tensor=4, say), with its optimizer slots."""
    found = []
    leaves = jax.tree_util.tree_leaves_with_path(abstract_tree, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
    for path, leaf in leaves:
        if not isinstance(leaf, nn.LogicallyPartitioned):
            continue
        spec = nn.logical_to_mesh_axes(tuple(leaf.names), LOGICAL_AXIS_RULES)
        for i, (dim, entry, size) in enumerate(_asked(spec, leaf.value.shape, mesh)):
            if size > 1 and dim % size:
                name = "/".join(str(getattr(key, "key", key)) for key in path)
                axes = "x".join(entry if isinstance(entry, tuple) else (entry,))
                found.append(f"{name}: dim {i} ({dim}) whole, not over {axes} ({size})")
    return found


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Sharding of a batch array: leading axis over (data, fsdp), the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp"), *([None] * (ndim - 1))))


def micro_batch_spec(ndim: int) -> PartitionSpec:
    """Micro-batches stacked as [count, rows, ...]: the count axis whole, rows over (data, fsdp).

    Needs an active mesh (`activate`), like `nn.with_logical_constraint`.
    """
    return PartitionSpec(None, ("data", "fsdp"), *([None] * (ndim - 1)))


@contextlib.contextmanager
def activate(mesh: Mesh):
    """Makes `mesh` and the rules current, so `nn.with_logical_constraint` applies when tracing."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(LOGICAL_AXIS_RULES):
        yield


def init_sharded(init_fn: Callable[[], Any], mesh: Mesh) -> tuple[Any, Any]:
    """Creates parameters directly in their sharded layout; no device ever holds them whole.

    init_fn: () -> tree with `nn.LogicallyPartitioned` leaves (e.g. `lambda: model.init(rng, ...)`).
    Returns (unboxed tree of sharded jax.Arrays, matching tree of NamedShardings).
    """
    abstract = jax.eval_shape(init_fn)
    shardings = logical_shardings(abstract, mesh)
    with activate(mesh):
        values = jax.jit(lambda: nn.unbox(init_fn()), out_shardings=shardings)()
    return values, shardings
