"""Test-wide set-up: 8 simulated CPU devices (for sharding tests), a temporary folder of
the session's own, and the `slow` marker."""

import os
import shutil
import tempfile

from small_runs import SMALL_MODEL, built_once, minilm_reviews_config, suite_xla_flags  # plain Python: imports no JAX

# Must happen before jax is imported anywhere: 8 simulated CPU devices for the tests marked
# `multidevice` (meshes, data parallelism, sharded checkpoints), or BERTJAX_TEST_DEVICES of
# them. tests/run_tests.sh runs the other tests on one: 8 simulated devices share the same 2
# cores, so a run on them spends much of its time dispatching to and reducing across them
# (benchmarks/README.md#the-test-suite). Compiles at -O0. Flags the shell exports are kept.
DEVICES = int(os.environ.get("BERTJAX_TEST_DEVICES", "8"))
os.environ["XLA_FLAGS"] = suite_xla_flags(os.environ.get("XLA_FLAGS", ""), DEVICES)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# The launchers the tests start (pretrain, finetune, demo, benchmark) keep freed memory for
# the next step, as launch/demo.sh does (bertjax/runtime/host_memory.py): the same numbers, a third
# less time (the prose test: 156 -> 107 s), about 0.7 GB more per process.
os.environ.setdefault("BERTJAX_KEEP_FREED_MEMORY", "1")

# TFDS and TensorFlow's autograph leave files in the temporary folder (about 80 empty
# metadata folders per GLUE test file): give each test process one of its own, removed at
# the end. pytest's tmp_path folders live there too; xdist workers nest theirs inside.
_SESSION_TMP = tempfile.mkdtemp(prefix="bertjax-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = _SESSION_TMP
# Compiled programs are cached (bertjax.runtime.compilation_cache) in the session's own cache, shared by
# the test processes and the launcher processes they start, never the user's.
os.environ.setdefault("BERTJAX_COMPILATION_CACHE", os.path.join(_SESSION_TMP, "xla_cache"))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory):
    """The demo corpus prepared once for the whole session (pre-training tests share it)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bertjax.data import prepare
    from configs import pretrain as pretrain_config

    directory = str(tmp_path_factory.mktemp("demo_data"))
    prepare.ensure_prepared(pretrain_config.get_config("tiny").data, directory)
    return directory


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")


def pytest_configure(config):
    import jax

    from bertjax.runtime import compilation_cache

    compilation_cache.enable()  # the session's cache (above): many tests compile the same small steps,
    # most of them in under the second below which the launchers leave a program uncached
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    config.addinivalue_line("markers", "slow: long-running test, skipped unless --runslow")
    config.addinivalue_line("markers", "heavy: a default-suite test of a minute or more on two cores, run first")
    config.addinivalue_line("markers", "multidevice: needs 8 devices (the default; skipped under BERTJAX_TEST_DEVICES=1)")


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    # Heavy tests first: the two xdist workers (tests/run_tests.sh: --dist worksteal) then share
    # the light ones at the end, instead of one worker starting a 3-minute test as the other finishes.
    items.sort(key=lambda item: "heavy" not in item.keywords)
    if DEVICES < 8:
        few = pytest.mark.skip(reason=f"needs 8 devices, this process has {DEVICES} (BERTJAX_TEST_DEVICES)")
        for item in items:
            if "multidevice" in item.keywords:
                item.add_marker(few)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _repo_on_path():
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)


@pytest.fixture
def tfds_reads(monkeypatch):
    """{"prepared": [...], "read": [...]}: the TFDS datasets a fine-tuning run asked builders
    of while process 0 prepared them first (finetune's process_zero_first "TFDS datasets"),
    and after."""
    import tensorflow_datasets as tfds

    from bertjax import trainer

    reads = {"prepared": [], "read": []}
    phase = ["read"]
    builder, first = tfds.builder, trainer.process_zero_first

    def recording_builder(name, **kwargs):
        reads[phase[0]].append(name)
        return builder(name, **kwargs)

    def recording_first(fn, what):
        phase[0] = "prepared" if what == "TFDS datasets" else phase[0]
        try:
            return first(fn, what)
        finally:
            phase[0] = "read"

    monkeypatch.setattr(tfds, "builder", recording_builder)
    monkeypatch.setattr(trainer, "process_zero_first", recording_first)
    return reads


@pytest.fixture(scope="session")
def launchers():
    """Launcher processes forked from one that has imported JAX and the model code once
    (tests/forked_launchers.py), for the many short launches (refusals, flag checks,
    conversions) that would each spend most of their time importing them."""
    from forked_launchers import Server

    server = Server()
    yield server
    server.close()


@pytest.fixture(scope="session")
def small_pretrained_run(tmp_path_factory):
    """A pre-training workdir (demo corpus, 4 steps of a one-layer model): checkpoint, MLM and
    NSP heads, tokenizer."""
    _repo_on_path()
    from bertjax import pretrain
    from configs import pretrain as pretrain_config

    def build(directory):
        config = pretrain_config.get_config("tiny")
        config.model.update(SMALL_MODEL)
        config.data.update(max_seq_length=64, max_predictions_per_seq=10)
        config.train.update(num_steps=4, global_batch_size=16, warmup_steps=1, log_every=2, eval_every=0)
        config.checkpoint.every = 4
        pretrain.train_and_evaluate(config, str(directory / "run"))

    return str(built_once(tmp_path_factory, "small_pretrain", build) / "run")


@pytest.fixture(scope="session")
def minilm_classifier_run(tmp_path_factory):
    """A fine-tuning workdir: all-MiniLM-L6-v2 taught REVIEWS ("good"/"bad", column `review`)
    in 12 steps of 8 at length 16 (small_runs.minilm_reviews_config, 8 copies, written in the
    workdir's parent); best/ holds weights that get all four right."""
    _repo_on_path()
    from bertjax import finetune

    def build(directory):
        summary = finetune.finetune(minilm_reviews_config(directory, copies=8, max_seq_length=16),
                                    str(directory / "run"))
        assert summary["best"]["metrics"]["accuracy"] == 1.0, summary

    return str(built_once(tmp_path_factory, "minilm_classifier", build) / "run")


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """{family: (workdir, its evaluation rows)}: 2-step one-layer runs of tagging (linear and
    BiLSTM heads), SQuAD v2 and multiple choice, each with the answers it wrote for its
    evaluation file (tests/test_prediction.py, tests/test_export.py)."""
    import json

    from small_runs import tiny_finetune_run
    from test_finetune_tasks import choice_rows, ner_sentences, qa_rows, squad_json, write_conll

    ner_dev, squad_dev = ner_sentences(6, seed=6), qa_rows(10, seed=6, impossible_every=3)
    choice_dev = choice_rows(6, seed=6)

    def build(directory):
        write_conll(directory / "ner_train.txt", ner_sentences(16, seed=5))
        write_conll(directory / "ner_dev.txt", ner_dev)
        (directory / "qa_train.json").write_text(json.dumps(squad_json(qa_rows(16, seed=5, impossible_every=3),
                                                                       "v2.0")))
        (directory / "qa_dev.json").write_text(json.dumps(squad_json(squad_dev, "v2.0")))
        for name, rows in (("train", choice_rows(16, seed=5)), ("dev", choice_dev)):
            (directory / f"choice_{name}.jsonl").write_text("".join(
                json.dumps({"context": c, "choices": o, "label": label}) + "\n" for c, o, label in rows))
        ner_files = dict(train_file=str(directory / "ner_train.txt"), eval_file=str(directory / "ner_dev.txt"),
                         max_seq_length=16)
        tiny_finetune_run("ner", directory / "ner", **ner_files)
        # The feature-based tagger: a BiLSTM over the embeddings and the layer concatenated.
        tiny_finetune_run("ner", directory / "ner_bilstm", dict(
            tagging_head="bilstm", lstm_hidden_size=16, feature_layers="0,-1", feature_combine="concat"), **ner_files)
        tiny_finetune_run("squad", directory / "squad", train_file=str(directory / "qa_train.json"),
                          eval_file=str(directory / "qa_dev.json"), max_query_length=12, doc_stride=8)
        tiny_finetune_run("choice", directory / "choice", train_file=str(directory / "choice_train.jsonl"),
                          eval_file=str(directory / "choice_dev.jsonl"))

    directory = built_once(tmp_path_factory, "prediction_runs", build)
    dev_rows = {"ner": ner_dev, "ner_bilstm": ner_dev, "squad": squad_dev, "choice": choice_dev}
    return {family: (str(directory / family / "run"), rows) for family, rows in dev_rows.items()}
