"""Launcher processes forked from a server that has already imported what the launchers import
before they read their flags (JAX, Flax, optax, the model and task code). The tests start
dozens of launchers that refuse bad input or only parse flags; forked, each skips those imports
(benchmarks/README.md#the-test-suite) and is otherwise `python *argv`: the launcher script run
whole as __main__, in a process of its own, with its own argv, environment, folder, stdout,
stderr and exit code, ended as Python ends a script (exit handlers included).

What a fresh launch does that a forked one cannot, and where it stays tested:
- settings read when a module is imported come from the server: the child refuses a request
  whose JAX_* or PYTHON* variables differ from the server's;
- host_memory.configure's restart with huge pages and its kept freed memory are off
  (tests/test_host_memory.py), and which modules a refusal imports is a fresh process's
  (tests/test_launchers.py's `test_a_run_refused_by_a_config_check_writes_nothing`).
The server refuses to fork once its imports have started a Python thread, a JAX backend or
TensorFlow, none of which survive a fork.
"""

import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile

_IMPORTED_BY_THE_CONFIGS = ("numpy", "absl.app", "absl.flags", "ml_collections", "jax", "flax.linen", "optax",
                            "bertjax.models", "bertjax.optim", "bertjax.tasks")
_READ_AT_IMPORT = ("JAX_", "PYTHON")  # environment variables whose values the server's imports fixed


class Server:
    """`run(argv, env, cwd, timeout)` -> subprocess.CompletedProcess of `python *argv`, forked."""

    def __init__(self):
        self._log = tempfile.TemporaryFile()
        self._process = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._log, text=True)

    def run(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None,
            timeout: int = 300) -> subprocess.CompletedProcess:
        """As subprocess.run([sys.executable, *argv], env=env, cwd=cwd, timeout=timeout,
        capture_output=True, text=True, stdin=subprocess.DEVNULL): this environment and
        folder unless given."""
        env, cwd = dict(os.environ) if env is None else env, os.getcwd() if cwd is None else str(cwd)
        with tempfile.TemporaryDirectory() as folder:
            outputs = {name: os.path.join(folder, name) for name in ("stdout", "stderr")}
            request = {"argv": argv, "env": env, "cwd": cwd, "timeout": timeout, **outputs}
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            answer = self._process.stdout.readline()
            if not answer:
                self._log.seek(0)
                raise RuntimeError(f"the launcher server ended: {self._log.read().decode()[-3000:]}")
            texts = {}
            for name, path in outputs.items():
                with open(path, encoding="utf-8", errors="replace") as f:
                    texts[name] = f.read()
        returncode = json.loads(answer)["returncode"]
        if returncode == -signal.SIGALRM:
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, texts["stdout"], texts["stderr"])
        return subprocess.CompletedProcess([sys.executable, *argv], returncode, texts["stdout"], texts["stderr"])

    def close(self):
        self._process.stdin.close()
        self._process.wait(timeout=60)
        self._log.close()


def _serve():
    import importlib
    import threading

    for module in _IMPORTED_BY_THE_CONFIGS:
        importlib.import_module(module)
    from jax._src import xla_bridge

    if threading.active_count() > 1 or xla_bridge._backends or "tensorflow" in sys.modules:
        raise RuntimeError("the launcher server's imports started a thread, a JAX backend or TensorFlow")
    fixed = {key: value for key, value in os.environ.items() if key.startswith(_READ_AT_IMPORT)}
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _become(request, fixed)  # the child never comes back here: it ends as the script does
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


def _become(request, fixed):
    """In the forked child: becomes `python *request["argv"]`. Raises SystemExit (or what the
    script raises), which ends this process as it ends a script."""
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
        os.dup2(os.open(path, flags), fd)  # first: whatever fails below is the test's to read
    signal.alarm(request["timeout"])  # a hung launcher is killed; Server.run raises TimeoutExpired
    asked = {key: value for key, value in request["env"].items() if key.startswith(_READ_AT_IMPORT)}
    if asked != fixed:
        differ = sorted(set(asked.items()) ^ set(fixed.items()))
        raise RuntimeError(f"a forked launch needs the server's JAX_* and PYTHON* variables (its imports read "
                           f"them); these differ: {differ}: start this launch as a fresh process")
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"], BERTJAX_KEEP_FREED_MEMORY="0", BERTJAX_HUGE_PAGES="0")
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.orig_argv = [sys.executable, *request["argv"]]  # what a restart of the process runs
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    sys.exit(0)


if __name__ == "__main__":
    _serve()
