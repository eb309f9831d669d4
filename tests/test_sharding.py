"""Mesh construction and sharded parameters on 8 simulated CPU devices (fsdp=4, tensor=2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from bertjax import sharding
from bertjax.models import BertConfig, BertEncoder

pytestmark = pytest.mark.multidevice  # meshes over the 8 simulated devices


def test_mesh_shape_resolves_the_rest_and_validates():
    assert sharding.mesh_shape(8, data=-1, fsdp=4, tensor=1) == (2, 4, 1)
    assert sharding.mesh_shape(8, data=1, fsdp=-1, tensor=2) == (1, 4, 2)
    with pytest.raises(ValueError, match="at most one"):
        sharding.mesh_shape(8, data=-1, fsdp=-1)
    with pytest.raises(ValueError, match="not divisible"):
        sharding.mesh_shape(8, data=-1, fsdp=3)
    with pytest.raises(ValueError, match="mesh.tensor must be a positive int"):
        sharding.mesh_shape(8, data=8, tensor=0)
    with pytest.raises(ValueError, match=r"data\*fsdp\*tensor = 2 but there is 1 device \("):
        sharding.mesh_shape(1, data=1, fsdp=2)


def test_training_refuses_a_mesh_of_three_axes_above_one():
    """On data=2, fsdp=2, tensor=2 pre-training trained on wrong gradients without an error (a
    walkthrough: encoder kernels' gradients off by up to their size, against one device; an XLA
    partitioner fault, docs/scaling-and-tpus.md). Any two axes are right."""
    from bertjax import finetune_setup, pretrain_setup
    from configs import finetune, pretrain

    for shape in ((2, 2, 2), (4, 2, 2), (2, 2, 4)):
        with pytest.raises(ValueError, match=rf"config.mesh: data={shape[0]}, fsdp={shape[1]} and tensor={shape[2]} "
                                             r"all above 1 train on wrong gradients"):
            sharding.check_training_mesh(shape)
    for shape in ((1, 4, 2), (4, 1, 2), (2, 4, 1), (8, 1, 1)):
        sharding.check_training_mesh(shape)
    with pytest.raises(ValueError, match="use two of the axes, e.g. config.mesh.data=1, fsdp=4, tensor=2"):
        pretrain_setup.validate_config(pretrain.get_config("tiny"), BertConfig.preset("tiny"), (2, 2, 2))
    demo = finetune.get_config("demo")
    with pytest.raises(ValueError, match="all above 1 train on wrong gradients"):
        finetune_setup.validate_config(demo, BertConfig.preset("tiny", vocab_size=784), (2, 2, 2), 784)


def test_logical_to_spec_drops_axes_that_do_not_divide():
    mesh = sharding.create_mesh(data=1, fsdp=4, tensor=2)
    assert sharding.logical_to_spec(("vocab", "embed"), (30522, 768), mesh) == PartitionSpec("tensor", "fsdp")
    assert sharding.logical_to_spec(("vocab", "embed"), (30521, 768), mesh) == PartitionSpec(None, "fsdp")
    assert sharding.logical_to_spec(("embed", "classes"), (768, 2), mesh) == PartitionSpec("fsdp", None)


class _FakeTpuChip:
    """What mesh_utils reads of a TPU device: its kind, its chip's coordinates, its process."""

    platform, core_on_chip = "tpu", 0

    def __init__(self, id, coords, process_index, device_kind):
        self.id, self.coords, self.process_index, self.device_kind = id, coords, process_index, device_kind

    def __repr__(self):
        return f"chip{self.id}@{self.process_index}"


def _tpu_pod(dims, kind):
    """The chips of a slice of `dims` chips, each host holding a 2x2 block (v4, v5e), ordered
    by host as jax.devices() lists them."""
    blocks_x, blocks_y = dims[0] // 2, dims[1] // 2
    chips = sorted(((z * blocks_x * blocks_y + (y // 2) * blocks_x + x // 2, (x, y, z))
                    for z in range(dims[2]) for y in range(dims[1]) for x in range(dims[0])),
                   key=lambda chip: (chip[0], chip[1][::-1]))
    return [_FakeTpuChip(i, coords, process, kind) for i, (process, coords) in enumerate(chips)]


def test_a_tensor_group_stays_on_one_host_of_a_tpu_pod():
    """The chip network's order put a row of 4 chips crossing two hosts on the tensor axis of a
    v5e-16 (4x4 chips, 2x2 a host) or a v4-64: each process held two hosts' share of a batch,
    and pre-training with host_split='files' refused to start with advice no mesh setting could
    follow (a review). Such a grid is laid out in host order; where the topology's order keeps
    tensor groups on one host, it is kept."""
    from jax.experimental import mesh_utils

    for kind, dims, shape in (("TPU v5 lite", (4, 4, 1), (4, 1, 4)), ("TPU v5 lite", (4, 4, 1), (1, 4, 4)),
                              ("TPU v4", (2, 4, 4), (8, 1, 4)), ("TPU v4", (2, 2, 4), (4, 1, 4))):
        chips = _tpu_pod(dims, kind)
        grid = sharding.device_grid(shape, chips)
        groups = grid.reshape(-1, shape[2])
        assert all(len({chip.process_index for chip in group}) == 1 for group in groups), (kind, dims, shape)
        processes = {chip.process_index for chip in chips}
        rows = {process: sum(group[0].process_index == process for group in groups) for process in processes}
        assert set(rows.values()) == {len(groups) // len(processes)}, rows
        if dims == (2, 2, 4):  # v4-32: the topology's order already keeps them on one host
            np.testing.assert_array_equal(grid, mesh_utils.create_device_mesh(shape, chips))


def test_a_parameter_left_whole_by_its_mesh_axes_is_named(caplog):
    """BERT's 30,522-token vocabulary over tensor=4: the embedding table (and its Adam slots) sat
    whole on every tensor shard, silently (a review)."""
    import optax

    from bertjax import trainer

    config = BertConfig.preset("tiny").replace(vocab_size=30522)
    mesh = sharding.create_mesh(data=2, fsdp=1, tensor=4)
    ids = jnp.zeros((2, 8), jnp.int32)
    init = lambda: BertEncoder(config).init(jax.random.key(0), ids)["params"]
    assert sharding.undivided(jax.eval_shape(init), mesh) == [
        "embeddings/word_embeddings/embedding: dim 0 (30522) whole, not over tensor (4)"]
    with caplog.at_level("WARNING"):
        trainer.state_shardings(init, optax.adam(1e-3), mesh)
    assert "1 parameter dimension(s) are not split as their mesh axes ask" in caplog.text
    assert sharding.undivided(jax.eval_shape(init), sharding.create_mesh(data=4, fsdp=1, tensor=2)) == []


def test_a_misspelt_logical_axis_name_is_an_error_not_a_replicated_array():
    import flax.linen as nn

    class Misspelt(nn.Module):
        @nn.compact
        def __call__(self, x):
            kernel = self.param("kernel", nn.with_logical_partitioning(nn.initializers.ones_init(), ("embd", "mlp")),
                                (x.shape[-1], 4))
            return x @ kernel

    mesh = sharding.create_mesh(data=1, fsdp=4, tensor=2)
    with pytest.raises(ValueError, match=r"unknown logical axis name\(s\) \['embd'\]"):
        sharding.init_sharded(lambda: Misspelt().init(jax.random.key(0), jnp.ones((2, 8)))["params"], mesh)
    with pytest.raises(ValueError, match="act_lenght"), sharding.activate(mesh):
        jax.jit(lambda x: sharding.constrain(x, (sharding.Axis.ACT_BATCH, "act_lenght")))(jnp.ones((8, 4)))
    constants = [value for key, value in vars(sharding.Axis).items() if key.isupper()]
    assert constants == [name for name, _ in sharding.LOGICAL_AXIS_RULES]  # one rule per name, none without


@pytest.fixture(scope="module")
def base_setup():
    """BERT-base's widths in two layers (each layer is split as every other)."""
    config = BertConfig.preset("base").replace(num_hidden_layers=2)
    mesh = sharding.create_mesh(data=1, fsdp=4, tensor=2)
    model = BertEncoder(config)
    ids = jnp.zeros((8, 16), jnp.int32)
    params, shardings = sharding.init_sharded(lambda: model.init(jax.random.key(0), ids)["params"], mesh)
    return config, mesh, model, params, shardings


def test_every_2d_base_weight_is_split_across_devices(base_setup):
    _, mesh, _, params, _ = base_setup
    assert len(mesh.devices.flat) == 8
    matrices = [(path, leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(params) if leaf.ndim == 2]
    assert len(matrices) == 3 + 2 * 6 + 1  # 3 embedding tables, 6 per layer, pooler
    for path, leaf in matrices:
        shard_shapes = {shard.data.shape for shard in leaf.addressable_shards}
        assert all(np.prod(s) < np.prod(leaf.shape) for s in shard_shapes), (jax.tree_util.keystr(path), shard_shapes)
    query = params["encoder"]["layer_1"]["attention"]["query"]["kernel"]
    assert query.sharding.spec == PartitionSpec("fsdp", "tensor")
    assert {s.data.shape for s in query.addressable_shards} == {(192, 384)}


def test_sharded_forward_equals_single_device(base_setup):
    config, mesh, model, params, shardings = base_setup
    rng = np.random.default_rng(0)
    ids = rng.integers(0, config.vocab_size, (8, 16)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[3, 10:] = 0
    with sharding.activate(mesh):
        forward = jax.jit(lambda p, i, m: model.apply({"params": p}, i, None, m),
                          in_shardings=(shardings, sharding.batch_sharding(mesh), sharding.batch_sharding(mesh)))
        sharded_sequence, sharded_pooled = forward(params, ids, mask)
    assert {shard.data.shape for shard in sharded_sequence.addressable_shards} == {(2, 16, 768)}
    host_params = jax.device_get(params)
    sequence, pooled = jax.jit(lambda p, i, m: model.apply({"params": p}, i, None, m))(host_params, ids, mask)
    np.testing.assert_allclose(np.asarray(sharded_sequence), np.asarray(sequence), atol=1e-5)
    np.testing.assert_allclose(np.asarray(sharded_pooled), np.asarray(pooled), atol=1e-5)


def test_sharded_attention_in_chunks_of_rows_and_heads_equals_single_device(monkeypatch):
    """A CPU attends a chunk of rows, or of a row's heads, at a time (strided, so each chunk
    spans the devices the batch and the heads are split over): sharded over fsdp=4 and
    tensor=2 with one row and two of four heads a chunk, the outputs equal one device's."""
    from bertjax.models import attention

    config = BertConfig.preset("tiny", vocab_size=97, num_attention_heads=4)
    mesh = sharding.create_mesh(data=1, fsdp=4, tensor=2)
    model = BertEncoder(config)
    ids = np.random.default_rng(0).integers(1, config.vocab_size, (8, 40)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[3, 30:] = 0
    params, shardings = sharding.init_sharded(lambda: model.init(jax.random.key(0), jnp.asarray(ids))["params"], mesh)
    whole = jax.jit(lambda p, i, m: model.apply({"params": p}, i, None, m))(jax.device_get(params), ids, mask)[0]
    monkeypatch.setattr(attention, "SCORE_CHUNK_BYTES", 2 * 40 * 40 * 4)  # the scores of 2 heads of one row
    assert attention._attention_chunks((8, 4, 40, config.head_dim), (8, 1, 1, 40), 40) == (8, 2)
    with sharding.activate(mesh):
        forward = jax.jit(lambda p, i, m: model.apply({"params": p}, i, None, m),
                          in_shardings=(shardings, sharding.batch_sharding(mesh), sharding.batch_sharding(mesh)))
        chunked = forward(params, ids, mask)[0]
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(whole), atol=1e-5)
