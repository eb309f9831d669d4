r"""Compile time of the pre-training step, unrolled layers vs `scan_layers`, as the depth grows.

  python benchmarks/compile_time.py [--preset=large] [--layers=6,12,24] [--batch_size=8] [--seq_len=128]

Lowers and compiles the trainer's `train_step` (optimizer included) for each number of
layers, once unrolled and once scanned, without running it; prints a table of seconds.
Unrolled, XLA compiles every layer again (time grows with depth); scanned, one layer body.
"""

import os
import sys

from absl import app, flags
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from anywhere

_PRESET = flags.DEFINE_string("preset", "large", "BERT size.")
_LAYERS = flags.DEFINE_list("layers", ["6", "12", "24"], "Depths to compile.")
_BATCH = flags.DEFINE_integer("batch_size", 8, "Rows per step.")
_SEQ = flags.DEFINE_integer("seq_len", 128, "Sequence length.")


def compile_seconds(num_layers: int, scan: bool) -> float:
    import jax

    from bertjax import optim, sharding, pretrain, trainer
    from bertjax.models import BertForPreTraining
    from bertjax.models import config as bert_config
    from configs import pretrain as pretrain_config

    bert = bert_config.resolve({"num_hidden_layers": num_layers, "scan_layers": scan}, preset=_PRESET.value,
                               **bert_config.this_host())
    config = pretrain_config.get_config("base")
    config.data.max_seq_length, config.data.max_predictions_per_seq = _SEQ.value, int(np.ceil(0.15 * _SEQ.value))
    model = BertForPreTraining(bert)
    batch = pretrain.abstract_inputs(config, _BATCH.value)
    dummy = {name: np.zeros(spec.shape, spec.dtype) for name, spec in batch.items()}
    optimizer = optim.make_optimizer(config.train)
    init_params = lambda: model.init(jax.random.key(0), **pretrain.model_inputs(dummy))["params"]
    mesh = sharding.create_mesh(devices=jax.devices()[:1])
    abstract, _ = trainer.state_shardings(init_params, optimizer, mesh)
    step = jax.jit(lambda s, b, i: trainer.train_step(s, b, i, objective=pretrain.objective(model),
                                                      train_config=config.train, grad_accum_steps=1), donate_argnums=0)
    return trainer.compile_step(step, abstract, batch, trainer.step_inputs(config.train, 0, mesh))[1]


def main(_):
    import jax

    print(f"BERT-{_PRESET.value} train step, batch {_BATCH.value}, length {_SEQ.value}, "
          f"{jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")
    print(f"{'layers':>6} {'unrolled (s)':>13} {'scan (s)':>9}")
    for layers in map(int, _LAYERS.value):
        print(f"{layers:>6} {compile_seconds(layers, False):>13.1f} {compile_seconds(layers, True):>9.1f}", flush=True)


if __name__ == "__main__":
    app.run(main)
