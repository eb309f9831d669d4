"""What every launcher in launch/ shares: quiet libraries, one-line errors, exit codes.

    from bertjax.runtime import cli           # first: quiets TensorFlow's C++ start-up notices
    ...absl flags...
    if __name__ == "__main__":
        cli.run(main)                 # instead of absl's app.run

* Noise: library INFO logs (orbax, absl, TensorFlow, JAX) and TensorFlow's C++ notices are
  off; warnings stay. `--verbosity=0` (or 1 for debug) or `BERTJAX_VERBOSE=1` brings them back.
* GPUs: every matmul goes to cuBLAS (`with_cublas_matmuls`);
  `XLA_FLAGS=--xla_gpu_enable_triton_gemm=true` brings XLA's Triton GEMMs back.
* `BERTJAX_CHECK_FLAGS=1` parses the flags and the config (file, overrides) and exits:
  a check that a command is well-formed without running it.
* Expected failures (a misspelt or bad config value, a missing or unreadable input, a
  checkpoint that does not fit, a busy workdir) end with one line `error: ...` on stderr
  and exit code 2; a run stopped on purpose (preemption, non-finite losses) with its
  message and exit code 3 (2 for non-finite losses at its last step: no step is left to
  resume, so not the code a scheduler retries). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import _thread
import contextlib
import difflib
import importlib.util
import logging
import os
import re
import select
import signal
import sys
import threading
import warnings
from typing import Any, Callable

_VERBOSE = os.environ.get("BERTJAX_VERBOSE", "") not in ("", "0") or any(
    arg.startswith(("--verbosity", "-v=", "--v=")) or arg == "-v" for arg in sys.argv[1:])
if _VERBOSE:  # before TensorFlow is imported anywhere (bertjax.runtime.tf_cpu quiets it by default)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
else:
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def with_cublas_matmuls(xla_flags: str) -> str:
    """XLA_FLAGS with every GPU matmul given to cuBLAS (XLA's Triton GEMMs off), unless the
    flags already choose: Triton's weight-gradient GEMMs wanted the tokens minor-most and XLA
    transposed the residual stream for them, so cuBLAS is faster, smaller and compiles sooner
    (benchmarks/README.md#cublas-for-every-matmul).
    CPUs and TPUs parse the flag and do nothing with it."""
    if "xla_gpu_enable_triton_gemm" in xla_flags:
        return xla_flags
    return f"{xla_flags} --xla_gpu_enable_triton_gemm=false".strip()


os.environ["XLA_FLAGS"] = with_cublas_matmuls(os.environ.get("XLA_FLAGS", ""))  # before JAX starts a backend

from absl import app, flags  # noqa: E402

# The flags defined below (define_run_flags, define_distributed_flags, define_config_file)
# belong to the launcher that asks for them, so its --help lists them.
flags.disclaim_key_flags()

EXIT_ERROR, EXIT_STOPPED, EXIT_INTERRUPTED = 2, 3, 130  # 130: the shells' code for a SIGINT
EXIT_PIPE_CLOSED = 141  # the shells' code for a SIGPIPE: what `yes | head` leaves
EXIT_TERMINATED = 143  # the shells' code for a SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM in a launcher with nothing to save on the way out (predict, features): it unwinds
    as a Ctrl-C does, so that what the launcher was writing is removed, not left half written."""


def unwind_on_sigterm() -> None:
    """SIGTERM raises Terminated in the main thread (the training launchers save and stop on it
    instead: bertjax.runtime.preemption)."""
    def terminated(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, terminated)


def stop_on_sigterm() -> None:
    """The training launchers: SIGTERM outside the training steps (reading and tokenizing,
    restoring, compiling, writing predictions) stops the run as a preemption does, with exit
    code 3 (run the same command again), where it killed the process with 143 and no word; while
    the steps run the loop's watcher saves a step instead. Single process only: a multi-process
    run's SIGTERM is jax.distributed's (its coordinated stop); call after `start_distributed`."""
    import jax

    if jax.distributed.is_initialized():
        return

    def stop(signum, frame):
        from bertjax.runtime.errors import StopSignal

        raise StopSignal("SIGTERM outside the training steps: run the same command again (it carries on from the "
                         "last checkpoint, if any)")

    signal.signal(signal.SIGTERM, stop)


LAUNCHERS = {"pre-training": "launch/pretrain.py", "fine-tuning": "launch/finetune.py"}
# Each kind's config module and a config of it: every config of a kind has the same keys.
_REFERENCE_CONFIGS = {"pre-training": ("pretrain.py", "tiny"), "fine-tuning": ("finetune.py", "demo")}
# Keys the runs read with a default, added after configs were written without them: not required.
_OPTIONAL_KEYS = ("recipe", "init_checkpoint_required", "model.preset", "train.adam_bias_correction",
                  "train.schedule", "train.decay_fraction", "train.decay_shape", "data.full_rows",
                  "data.tfds_data_dir", "data.label_kind", "data.eval_input_pattern")
_CONFIG_KINDS: dict[str, str] = {}  # config flag -> the kind of config (a key of LAUNCHERS) it must hold
# Loggers that talk at INFO about their own business during a normal run.
_CHATTY_LOGGERS = ("absl", "orbax", "jax", "etils", "tensorflow", "tensorflow_datasets", "bertjax")


class _LibraryNoise(logging.Filter):
    """Drops libraries' deprecation notices (TensorFlow, TFDS, orbax): they repeat and are not
    for the person running bertjax. orbax's errors keep their line but lose their traceback
    (a failed save logs four, some 300 lines): bertjax reports the failure itself, in one line;
    one whose cause is a second Ctrl-C goes whole (a wait for a save, stopped: "Save Finalize
    thread failed", where the save may have finished; the launcher says it was interrupted)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "orbax" in record.pathname and record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt):
            return False
        if "orbax" in record.pathname and record.exc_info:
            record.exc_info, record.exc_text = None, None
        return "bertjax" in record.pathname or "deprecat" not in record.getMessage().lower()


class _SaidOnce(logging.Filter):
    """Drops a warning this run already gave word for word: set-up code that runs once a split
    or a pipeline (the data's checks, a prepared folder's, a file's layout) said the same line
    two or three times. A repeat with other values (another step, another count) still shows."""

    def __init__(self):
        super().__init__()
        self.said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        if getattr(record, "process_named", False):  # (by `_OneCopy` on a handler before this one)
            message = message.partition(": ")[2]
        if record.exc_info:  # (the same words of another error are another warning)
            message += repr(record.exc_info[1])
        if message in self.said:
            return False
        self.said.add(message)
        return True


def new_run_warnings() -> None:
    """Each run of a sweep (one process) gives its own warnings, though an earlier run gave
    the same words (the same evaluation step not finite)."""
    for handler in logging.getLogger().handlers:
        for said_once in (f for f in handler.filters if isinstance(f, _SaidOnce)):
            said_once.said.clear()


class _OneCopy(logging.Filter):
    """On process `index` of a multi-process run: a record marked console.PROCESS_SPECIFIC
    (what this host alone may meet) is named by its process; on processes other than 0 only
    those and errors pass, the rest process 0 logs for every process."""

    def __init__(self, index: int, count: int):
        super().__init__()
        self.index, self.prefix = index, f"process {index} of {count}: "

    def filter(self, record: logging.LogRecord) -> bool:
        specific = getattr(record, "process_specific", False)
        if self.index and not (specific or record.levelno >= logging.ERROR):
            return False
        if (specific or self.index) and not getattr(record, "process_named", False):  # (once: several handlers)
            record.msg, record.process_named = self.prefix + str(record.msg), True
        return True


def _one_copy_of_logs(index: int, count: int) -> None:
    """The log handlers of process `index` of `count` > 1 pass the logs as `_OneCopy` says;
    library warnings go through them too. Not when verbose: each host's own logs are wanted."""
    if count < 2 or _VERBOSE:
        return
    logging.captureWarnings(True)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_OneCopy(index, count))


class _PlainFormatter(logging.Formatter):
    """'warning: message', as the launchers' 'error: ' lines: absl's prefix (date, time, thread
    id, source file:line) says nothing to the person running bertjax (BERTJAX_VERBOSE keeps it)."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        return f"{record.levelname.lower()}: {record.message}" + (
            "\n" + self.formatException(record.exc_info) if record.exc_info else "")


def _unraisable(unraisable) -> None:
    """sys.unraisablehook: a Ctrl-C or SIGTERM whose handler raised inside a destructor
    (TensorFlow's clean-up of its functions) is raised again in the main thread, by the same
    signal's handler, where it unwinds as anywhere else (outputs being written removed): Python
    prints it and goes on, so a second Ctrl-C saved and stopped instead of quitting. Drops the
    abandoned reads of a corrupt checkpoint (their errors are already in bertjax's one-line
    warning); reports anything else as usual."""
    from bertjax.runtime.errors import StopSignal

    if isinstance(unraisable.exc_value, (KeyboardInterrupt, StopSignal)):
        terminated = isinstance(unraisable.exc_value, (Terminated, StopSignal))
        # From another thread, a moment later: the main thread runs a signal's handler at once,
        # and raised here it would be ignored again. A launcher whose main returns first raises
        # it then (`_raise_pending_interrupt`).
        _PENDING_INTERRUPT[:] = [unraisable.exc_value]
        timer = threading.Timer(0.05, _thread.interrupt_main, [signal.SIGTERM if terminated else signal.SIGINT])
        timer.daemon = True
        timer.start()
        return
    leftover = "_read_array" in repr(unraisable.object) or "Event loop is closed" in str(unraisable.exc_value)
    if _VERBOSE or not leftover:
        sys.__unraisablehook__(unraisable)


_PENDING_INTERRUPT: list[BaseException] = []  # an interrupt raised in a destructor, not yet raised again


def _raise_pending_interrupt() -> None:
    """Raises an interrupt a destructor swallowed that has not landed again yet."""
    if _PENDING_INTERRUPT:
        raise _PENDING_INTERRUPT.pop()


def _quit_interrupted(interrupt: KeyboardInterrupt) -> None:
    """Exits now, 143 for SIGTERM (Terminated), 130 for Ctrl-C (a second one, or one before the
    steps), 3 for a training launcher's SIGTERM (StopSignal, a stop as the run's own): after a
    compile or a stalled input thread would be too late."""
    from bertjax.runtime.errors import StopSignal

    if isinstance(interrupt, StopSignal):  # (a SIGTERM's stop past the launcher's own handling: still a stop)
        line, code = f"stopped: {interrupt}", EXIT_STOPPED
    elif isinstance(interrupt, Terminated):
        line, code = "interrupted (SIGTERM)", EXIT_TERMINATED
    else:
        line, code = "interrupted (Ctrl-C)", EXIT_INTERRUPTED
    print(line, file=sys.stderr)
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)


def _interrupt_quietly(kind, value, traceback) -> None:
    """A launcher's sys.excepthook: a Ctrl-C before `run` catches it (while it imports JAX and
    TensorFlow) quits as one later does, not with a page of the imports' traceback (a
    walkthrough)."""
    if issubclass(kind, KeyboardInterrupt):
        _quit_interrupted(value)
    sys.__excepthook__(kind, value, traceback)


# (a launcher's alone: a Python program that imports bertjax keeps its own handling)
if sys.argv and sys.argv[0] and os.path.basename(os.path.dirname(os.path.abspath(sys.argv[0]))) == "launch":
    sys.excepthook = _interrupt_quietly


def quiet_libraries() -> None:
    """Library loggers to WARNING and known repeated warnings off, unless verbose."""
    if _VERBOSE:
        logging.getLogger().setLevel(logging.INFO)
        return
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # orbax reads checkpoints in asyncio tasks; when a file is corrupt, every failed task's
    # error (pages of TensorStore specs) is reported again after bertjax has handled it.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="coroutine '_read_array", category=RuntimeWarning)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_LibraryNoise())
        handler.addFilter(_SaidOnce())
        handler.setFormatter(_PlainFormatter())
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*Sharding info not provided.*")


def error_line(error: BaseException) -> str:
    """An exception's message on one line (its cause's, if it has none of its own). Only real
    line breaks go: a message's escaped "\\n" may be advice to type (tr '\\r' '\\n')."""
    while error is not None and not str(error).strip():
        error = error.__cause__ or error.__context__
    message = str(error) if error is not None else "unknown error"
    return " ".join(message.split())


@contextlib.contextmanager
def named_by_flag(flag: str):
    """Prefixes a ValueError raised inside with `flag` (e.g. "--pairs"): a library's message
    names its Python argument, which a launcher's user never typed."""
    try:
        yield
    except ValueError as e:
        raise ValueError(f"{flag}: {e}") from None


@contextlib.contextmanager
def settings_as_flags(flags: dict[str, str]):
    """Names a launcher's flags (e.g. {"config.data.text_key": "--text_key"}) where a
    library's ValueError or logged warning names the config setting the flag stands for."""

    # A setting's whole name: not inside a longer one ("type_vocab_size=") nor a flag ("--vocab_size=").
    named = re.compile("|".join(rf"(?<![-\w.]){re.escape(setting)}" for setting in flags))

    def as_flags(message: str) -> str:
        return named.sub(lambda match: flags[match.group(0)], message)

    def rename(record: logging.LogRecord) -> bool:
        if not getattr(record, "named_by_flags", False):  # (once: each handler filters the record)
            record.msg, record.args, record.named_by_flags = as_flags(record.getMessage()), (), True
        return True

    handlers = list(logging.getLogger().handlers)  # (a filter of a logger sees only what is logged to it)
    for handler in handlers:
        handler.addFilter(rename)
    try:
        yield
    except ValueError as e:
        raise ValueError(as_flags(str(e))) from None
    finally:
        for handler in handlers:
            handler.removeFilter(rename)


def input_error_line(error: BaseException) -> str:
    """The line for a ValueError or OSError: its own, unless it is a collective's failure because
    another process went away (multihost_utils raises those as a ValueError: a peer that failed
    at start-up left this one with gloo's "Connection reset by peer" and no word of why)."""
    line = error_line(error)
    return expected_failure(error) if _peer_lost(line) else line


def out_of_device_memory(error: BaseException) -> bool:
    """Whether `error` is XLA's RESOURCE_EXHAUSTED (a JaxRuntimeError): a batch or model too large."""
    return type(error).__name__ in ("JaxRuntimeError", "XlaRuntimeError") and "RESOURCE_EXHAUSTED" in str(error)


def expected_failure(error: BaseException) -> str | None:
    """The one line for a failure that is the user's to fix but is neither a ValueError nor an
    OSError, else None (a bug: its traceback is kept): out of device memory (XLA's
    RESOURCE_EXHAUSTED, a JaxRuntimeError), and a remote path that is missing or not readable
    (TensorFlow's gfile raises its own NotFoundError, PermissionDeniedError, ...), and, in a
    multi-host run, a collective or barrier that failed because another process went away (it
    failed or was killed: its own output says why; here a traceback, then the interpreter's
    shutdown waited for it until JAX aborted)."""
    message = error_line(error)
    if _peer_lost(message):
        return f"another process of this run has gone (its own output says why): this one stops too ({message[:200]})"
    if out_of_device_memory(error):
        return ("out of device memory: lower the batch size (config.train.global_batch_size or batch_size, "
                "--batch_size) or max_seq_length, or shard the model over more devices (config.mesh.fsdp); "
                f"{message[:300]}")
    from bertjax.runtime import fileio

    # TensorFlow's gfile errors on a remote path: missing, refused, or not reached (no network: a
    # FailedPrecondition from libcurl, an Unavailable, a deadline)
    remote = fileio.remote_errors()
    tf = sys.modules.get("tensorflow")
    reached = (tf.errors.FailedPreconditionError, tf.errors.UnavailableError, tf.errors.DeadlineExceededError) \
        if tf is not None and hasattr(tf, "errors") else ()
    if (remote or reached) and isinstance(error, (*remote, *reached)) and re.search(r"\b(?!https?://)\w+://", message):
        return message
    return None


# What a collective or barrier says when a peer process has gone: gloo's (CPU) closed connection
# (reset where the peer was killed inside a collective: gloo's only, as a remote read's may be),
# the coordination service's missed heartbeats.
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "heartbeat timeout",
              "stopped sending heartbeats")


def _peer_lost(message: str) -> bool:
    jax = sys.modules.get("jax")
    signs = any(sign in message for sign in _PEER_LOST) and ("reset by peer" not in message or "Gloo" in message)
    return jax is not None and jax.distributed.is_initialized() and signs


def _flag_error(error: BaseException, argv: list[str], flag_name: str = "config") -> str:
    """A flag-parsing failure -> one line naming the flag (a config key that does not exist,
    a value of the wrong type, a config file that cannot be loaded). `flag_name`: the config
    flag that failed, when known."""
    message = error_line(error)
    overrides = [a.split("=")[0] for a in argv if a.startswith("--") and "." in a.split("=")[0]]
    match = re.search(r'Did you mean "(\w+)" instead of "(\w+)"', message)
    if match:  # ml_collections: an override of a key that does not exist
        suggestion, bad = match.groups()
        flag = next((a for a in overrides if re.search(rf"\.{bad}(\.|$)", a)), f"--{flag_name}...{bad}")
        if not flag.endswith(f".{bad}"):  # a section on the way: --config.tain.num_steps
            return f"{flag}: no config section {bad!r}; did you mean {suggestion!r}?"
        return f"{flag}: no such config key; did you mean {suggestion!r}?"
    unknown = re.match(r"Unknown command line flag '([\w.]+)'", message)  # (absl may add its own suggestion)
    config_key = unknown and unknown.group(1).startswith(f"{flag_name}.") and flag_name in flags.FLAGS
    if isinstance(error, (AttributeError, KeyError)) or config_key:  # (a launcher without --config: no such flag)
        key = unknown.group(1).split(".")[-1] if unknown else message.strip("'\"")
        flag = next((a for a in overrides if a.endswith(f".{key}")), None)
        if flag is None:
            return f"--{flag_name}: no such config key ({message})"
        suggestion = _closest_key(flag, flag_name, argv)
        return f"{flag}: no such config key" + (f"; did you mean {suggestion!r}?" if suggestion else "")
    if unknown:  # absl suggests only the closest few, often none; --confg.train.x: the flag before the dot
        name, dot, rest = unknown.group(1).partition(".")
        close = difflib.get_close_matches(name, [flag for flag in flags.FLAGS if len(flag) > 1], n=1, cutoff=0.6)
        return f"--{unknown.group(1)}: no such flag" + (f"; did you mean --{close[0]}{dot}{rest}?" if close else "")
    boolean = re.search(r"Non-boolean argument to boolean flag', '(.*)'\)", message)
    if boolean:  # ml_collections' tuple ('Non-boolean argument to boolean flag', 'maybe')
        flag = next((a.split("=")[0] for a in argv if a.startswith("--") and a.endswith(f"={boolean.group(1)}")),
                    f"--{flag_name}")
        return f"{flag}={boolean.group(1)}: expected True or False"
    early = re.fullmatch(r"Found (--[\w.]+)=?.* in argv before a value for (--\w+) was specified", message)
    if early:  # ml_collections reads the overrides after the config
        return f"{early.group(1)}: give {early.group(2)}=... first, then the overrides of its keys"
    config_arg = next((a for a in reversed(argv) if a.startswith(f"--{flag_name}=")), f"--{flag_name}")
    if "Failed loading config file" in message or "earlier failure to load" in message:
        reason = re.search(r"\[Errno \d+\] ([^:]+)", message)
        return f"{config_arg}: cannot load the config file ({reason.group(1) if reason else message})"
    required = re.findall(r"Flag (--\w+) must have a value other than None", message)
    if required:  # absl's one line a flag (a walkthrough: three lines for extract_features without flags)
        flags_named = ("flags " if len(required) > 1 else "flag ") + ", ".join(required)
        return f"missing the required {flags_named} (--help describes {'them' if len(required) > 1 else 'it'})"
    typed = re.fullmatch(r"flag (--[\w.]+=.*?): (invalid literal for int\(\)|could not convert string to float)"
                         r".*", message)
    if typed:  # ml_collections parses by the key's type and passes on Python's own words
        return f"{typed.group(1)}: expected {'an int' if 'int' in typed.group(2) else 'a number'}"
    if isinstance(error, flags.Error):
        if "Traceback" in str(error):  # get_config raised: keep its last line, the exception itself
            last = [line for line in str(error).splitlines() if line.strip()][-1]
            return f"{config_arg}: {last.split(': ', 1)[-1]}"
        return str(error)
    return f"{config_arg}: {message}"


def _closest_key(override: str, flag_name: str, argv: list[str]) -> str | None:
    """`--config.train.batch_size` -> the key of config.train closest to batch_size (e.g.
    'global_batch_size'), or None; read from the config file, loaded again without overrides."""
    *sections, key = override[2:].split(".")[1:]
    file_arg = next((a for a in reversed(argv) if a.startswith(f"--{flag_name}=")), None)
    try:
        flag = flags.FLAGS[flag_name]
        config = flag.parser.parse(file_arg.split("=", 1)[1]) if file_arg else flag.default
        for section in sections:
            config = config[section]
        keys = list(config.keys())
    except Exception:  # noqa: BLE001 -- no config to read: no suggestion
        return None
    if _OTHER_STAGES_KEY.get(key) in keys:
        return _OTHER_STAGES_KEY[key]
    abbreviated = [name for name in keys if _abbreviates(key.split("_"), name.split("_"))]
    if len(abbreviated) == 1:  # sweep_lr: sweep_learning_rates, where spelling alone says 'sweep'
        return abbreviated[0]
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    return close[0] if close else next((name for name in keys if key in name), None)


def _abbreviates(typed: list[str], words: list[str]) -> bool:
    """Whether the words of a typed key abbreviate a key's words, in order and all of them: each
    a word itself or the initials of a run of words, with or without a plural "s"
    (['sweep', 'lrs'] of ['sweep', 'learning', 'rates']; ['lr'] of ['learning', 'rate'])."""
    if not typed or not words:
        return not typed and not words
    for n in range(1, len(words) + 1):
        initials = "".join(word[0] for word in words[:n])
        spelled = n == 1 and typed[0] == words[0]
        if (spelled or (n > 1 and typed[0] in (initials, initials + "s"))) and _abbreviates(typed[1:], words[n:]):
            return True
    return False


# A key of one stage's config.train -> the other stage's for the same thing (spelling alone
# would suggest num_steps for fine-tuning's warmup_steps).
_OTHER_STAGES_KEY = {"warmup_steps": "warmup_proportion", "warmup_proportion": "warmup_steps",
                     "batch_size": "global_batch_size", "global_batch_size": "batch_size"}


def _parse_flags(argv: list[str]) -> list[str]:
    from ml_collections.config_flags.config_flags import is_config_flag  # documented for users, not re-exported

    flag_name = "config"
    try:
        remaining = flags.FLAGS(argv)
        for flag_name in [name for name in flags.FLAGS if is_config_flag(flags.FLAGS[name])]:
            _ = flags.FLAGS[flag_name].value.keys  # a config file that failed to load raises only when read
    except Exception as e:  # noqa: BLE001 -- any parse failure is the user's input, reported in one line
        named = re.match(r"flag --(\w+)=", str(e))  # absl names the flag whose value failed (demo's --pretrain)
        if named and named.group(1) in _CONFIG_KINDS:
            flag_name = named.group(1)
        print(f"error: {_flag_error(e, argv, flag_name)}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    for flag_name, kind in _CONFIG_KINDS.items():
        given = config_kind(flags.FLAGS[flag_name].value)
        config_arg = next((a for a in reversed(argv) if a.startswith(f"--{flag_name}=")), f"--{flag_name}")
        if given != kind:
            remedy = (f"run it with {LAUNCHERS[given]}" if flag_name == "config"
                      else f"--{flag_name} takes a {kind} config")  # launch/demo.py's --pretrain, --finetune
            print(f"error: {config_arg} is a {given} config: {remedy}", file=sys.stderr)
            sys.exit(EXIT_ERROR)
        missing, extra = _key_differences(flags.FLAGS[flag_name].value, kind)
        if missing:  # else a traceback wherever the run first reads one
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            print(f"error: {config_arg} has no {', '.join(missing[:5])}{more}: a {kind} config needs every key of "
                  f"configs/{_REFERENCE_CONFIGS[kind][0]}'s (start from one of them)", file=sys.stderr)
            sys.exit(EXIT_ERROR)
        if extra:  # else set in one's own file and read by nothing, without a word (a walkthrough)
            key, known = extra[0]
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            print(f"error: {config_arg} has {key}, which no {kind} run reads"
                  + (f"; did you mean {close[0]!r}?" if close else f" (configs/{_REFERENCE_CONFIGS[kind][0]} has "
                     "every key it reads)"), file=sys.stderr)
            sys.exit(EXIT_ERROR)
    if len(remaining) > 1:
        print(f"error: unexpected arguments: {remaining[1:]}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    return remaining


def _key_differences(config, kind: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(the dotted keys of the repository's configs of `kind` that `config` lacks, but for those
    read with a default; [(a key `config` has that they lack, the keys of its section)]), both
    empty where the repository's configs/ is not there, as in an installed package without it."""
    from flax.traverse_util import flatten_dict

    file, option = _REFERENCE_CONFIGS[kind]
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs", file)
    if not os.path.exists(path):
        return [], []
    spec = importlib.util.spec_from_file_location(f"_bertjax_reference_{kind}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    keys = lambda c: set(flatten_dict(c.to_dict(), sep=".", keep_empty_nodes=True))
    reference, given = keys(module.get_config(option)), keys(config)
    section = lambda key: key.rpartition(".")[0]  # noqa: E731
    # (a key under one the reference holds whole, an empty dict of its own, is that key's value)
    extra = [(key, sorted(k for k in reference if section(k) == section(key))) for key in sorted(given - reference)
             if not any(key.startswith(f"{known}.") for known in reference)]
    return sorted(reference - given - set(_OPTIONAL_KEYS)), extra


def run(main: Callable[[list[str]], None]) -> None:
    """absl's app.run(main) with quiet libraries, one-line flag and input errors, exit codes."""

    def wrapped(argv):
        if os.environ.get("BERTJAX_CHECK_FLAGS", "") not in ("", "0"):  # the README's commands are checked this way
            print("flags and config parse (their values are checked when the command runs)")
            return
        quiet_libraries()
        sys.unraisablehook = _unraisable
        from bertjax.runtime import compilation_cache
        from bertjax.runtime.errors import StopSignal, TrainingStopped

        compilation_cache.enable()
        try:
            main(argv)
            _raise_pending_interrupt()
        except (TrainingStopped, StopSignal) as stopped:
            if not getattr(stopped, "resumable", True):  # diverged at its last step: a retry trains nothing
                print(f"error: {stopped}", file=sys.stderr)
                _exit(EXIT_ERROR)
            print(f"stopped: {stopped}", file=sys.stderr)
            _exit(EXIT_STOPPED)
        except BrokenPipeError as e:
            if not _stdout_reader_left():  # another connection broke (a remote file's): an error
                print(f"error: {error_line(e)}", file=sys.stderr)
                _exit(EXIT_ERROR)
            # The reader of stdout left (predict ... | head): done, quietly.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the exit's flush would fail again)
            os._exit(EXIT_PIPE_CLOSED)
        except KeyboardInterrupt as interrupt:  # a second Ctrl-C (the first saves and stops), or one before the steps
            _quit_interrupted(interrupt)
        except (ValueError, OSError) as e:  # configuration and input errors (FileNotFoundError is an OSError)
            print(f"error: {input_error_line(e)}", file=sys.stderr)
            _exit(EXIT_ERROR)
        except Exception as e:
            why = expected_failure(e)
            if why is None:  # a bug: its traceback
                raise
            print(f"error: {why}", file=sys.stderr)
            _exit(EXIT_ERROR)

    app.run(wrapped, flags_parser=_parse_flags)


def config_kind(config) -> str:
    """'fine-tuning' for a configs/finetune.py config (it names a task), else 'pre-training'."""
    return "fine-tuning" if "task" in config else "pre-training"


def _stdout_reader_left() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll flags its write end with POLLERR)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's capture), or no poll
        return False


def _exit(code: int) -> None:
    """sys.exit(code), or os._exit once everything is flushed where the interpreter's shutdown
    would go wrong:
    - a stalled input thread is still inside TensorFlow (its shutdown would abort; checkpoints
      were written before TrainingStopped was raised);
    - a step is still compiling ahead (`bertjax.runtime.compile_ahead`): the shutdown would wait for
      it, up to a minute on a GPU, past a preemption's grace period;
    - under jax.distributed, after an error: the shutdown waits for every process, so a process
      that failed alone (e.g. on --fail_on_truncation) would wait minutes for the others, themselves
      waiting for it at their next barrier; gone, it ends their wait with an error.
    Under jax.distributed a stop (every process stops at the same step) first leaves JAX's
    shutdown barrier with the others: a process ending by os._exit would skip it, and leave the
    others waiting there until they abort."""
    from bertjax.runtime import compile_ahead, preemption

    jax = sys.modules.get("jax")
    distributed = jax is not None and jax.distributed.is_initialized()
    if code == EXIT_STOPPED and distributed:
        jax.distributed.shutdown()
    failed_alone = code == EXIT_ERROR and distributed
    if preemption.input_thread_alive() or compile_ahead.compiling() or failed_alone:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def define_config_file(name: str, default: str | None, help_text: str, kind: str):
    """A locked config-file flag (with a default file, or None: then required) holding a `kind`
    config (a key of LAUNCHERS; another kind is one line naming its launcher). ml_collections
    loads a default file, and applies its --NAME.key=value overrides, when the flag is
    defined: a bad override ends there with one line, as it would at parsing."""
    from ml_collections import config_flags

    _CONFIG_KINDS[name] = kind
    return _defined(lambda: config_flags.DEFINE_config_file(name, default, help_text, lock_config=True), name)


def define_config_dict(name: str, config, help_text: str):
    """A config flag holding `config` (a launcher's own ConfigDict, not a file); its
    --NAME.key=value overrides are applied when the flag is defined: a bad one ends with one line."""
    from ml_collections import config_flags

    return _defined(lambda: config_flags.DEFINE_config_dict(name, config, help_text), name)


def _defined(define: Callable[[], Any], name: str):
    """define(), a config flag whose overrides ml_collections applies at once; their error as
    one line and exit code 2, as at parsing."""
    try:
        return define()
    except Exception as e:  # noqa: BLE001 -- the overrides are the user's input, reported in one line
        print(f"error: {_flag_error(e, sys.argv, name)}", file=sys.stderr)
        sys.exit(EXIT_ERROR)


# -- Flags the launchers share. --

def define_run_flags(config_help: str, kind: str):
    """--config (an ml_collections config file, locked, of `kind`: a key of LAUNCHERS),
    --workdir, and the multi-host flags --distributed, --coordinator_address,
    --num_processes, --process_id (see bertjax.runtime.distributed). Returns the (config, workdir)
    flag holders."""
    from ml_collections import config_flags

    _CONFIG_KINDS["config"] = kind
    config = config_flags.DEFINE_config_file("config", None, config_help, lock_config=True)
    workdir = flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and data go (local or gs://).")
    define_distributed_flags()
    flags.mark_flags_as_required(["config", "workdir"])
    return config, workdir


def define_vocabulary_flags() -> Callable[[], dict[str, Any]]:
    """--vocab_file and --do_lower_case (the original scripts' names): the tokenizer of a model
    that comes with none, or one to use instead of its own. Returns a function giving
    `load_model`'s vocab_path and do_lower_case arguments from them."""
    vocab = flags.DEFINE_string("vocab_file", "", "WordPiece vocab.txt, Hugging Face tokenizer.json or SentencePiece "
                                ".model, read as it is (default: the model's own)")
    lower = flags.DEFINE_bool("do_lower_case", None, "whether --vocab_file is uncased (default: the model's "
                              "casing, else what the vocabulary's tokens show)")

    def arguments() -> dict[str, Any]:
        from bertjax.runtime import fileio

        if vocab.value and fileio.isdir(vocab.value):
            raise ValueError(f"--vocab_file={vocab.value} is a folder; give its vocab.txt, tokenizer.json or .model")
        if vocab.value and not fileio.exists(vocab.value):
            raise ValueError(f"--vocab_file={vocab.value}: no such file")
        return {"vocab_path": vocab.value, "do_lower_case": lower.value}

    return arguments


def define_precision_flag(default: str | None = None) -> flags.FlagHolder:
    """--precision: `load_model`'s products, float32 or bfloat16 (operands rounded, float32 sums;
    fast where the hardware has bfloat16 units: CPUs with AMX or AVX512_BF16, GPUs, TPUs)."""
    platform = "bfloat16 on TPU/GPU, float32 on CPU" if default is None else default
    return flags.DEFINE_enum("precision", default, ["float32", "bfloat16"],
                             f"products: float32, or bfloat16 operands with float32 sums (default: {platform}; "
                             "agreement with float32: benchmarks/README.md#inference-precision)")


def define_distributed_flags() -> None:
    """The multi-host flags --distributed, --coordinator_address, --num_processes,
    --process_id (see bertjax.runtime.distributed), read by `start_distributed`."""
    flags.DEFINE_enum("distributed", "auto", ["auto", "on", "off"],
                      "auto: initialise jax.distributed when the environment shows several processes.")
    flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-host by hand).")
    flags.DEFINE_integer("num_processes", None, "Number of processes (multi-host by hand).")
    flags.DEFINE_integer("process_id", None, "This process's index (multi-host by hand).")


def start_distributed() -> None:
    """Calls bertjax.runtime.distributed.initialize with the flags of `define_distributed_flags`;
    on several processes, the logs every process would write alike are left to process 0
    (`_one_copy_of_logs`)."""
    from bertjax.runtime import distributed

    values = flags.FLAGS
    if distributed.initialize(values.distributed, values.coordinator_address, values.num_processes,
                              values.process_id):
        import jax

        _one_copy_of_logs(jax.process_index(), jax.process_count())
