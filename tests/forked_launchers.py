"""Launcher processes forked from a server that has already imported what every launcher
imports before it reads its flags (JAX, Flax, optax, the model and task code: about 1.5 s of
a refused launch's 2 s). The tests of launchers refusing bad input start dozens of them;
forked, each is the launcher's own code from `if __name__ == "__main__"` on, in a process of
its own, with its own argv, environment, folder, stdout, stderr and exit code.

Fork safety: the server imports modules only. No JAX backend, TensorFlow or thread pool is
started before a fork, so each child starts its own as a fresh process would. What a fresh
launch does differently, and the tests that keep it: host_memory.configure's restart and
kept freed memory (off here: JAX is imported; tests/test_host_memory.py), and the imports a
refusal makes (tests/test_launchers.py's `test_a_run_refused_by_a_config_check_writes_nothing`,
a fresh process).
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


class Server:
    """`run(argv, env, cwd, timeout)` -> subprocess.CompletedProcess of `python *argv`, forked."""

    def __init__(self):
        self._log = tempfile.TemporaryFile()
        self._process = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._log, text=True)

    def run(self, argv: list[str], env: dict[str, str], cwd: str, timeout: int) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory() as folder:
            outputs = {name: os.path.join(folder, name) for name in ("stdout", "stderr")}
            request = {"argv": argv, "env": env, "cwd": str(cwd), "timeout": timeout, **outputs}
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
        return subprocess.CompletedProcess(argv, json.loads(answer)["returncode"], texts["stdout"], texts["stderr"])

    def close(self):
        self._process.stdin.close()
        self._process.wait(timeout=60)
        self._log.close()


def _serve():
    import importlib

    for module in _IMPORTED_BY_THE_CONFIGS:
        importlib.import_module(module)
    import threading

    from jax._src import xla_bridge

    if threading.active_count() > 1 or xla_bridge._backends or "tensorflow" in sys.modules:  # not safe to fork
        raise RuntimeError("the launcher server's imports started a thread, a JAX backend or TensorFlow")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _launch(request)  # never returns
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


def _launch(request):
    """In the forked child: runs the launcher request["argv"] as `python *argv` would, then exits."""
    code = 1
    try:
        signal.alarm(request["timeout"])  # a hung launcher is killed, as subprocess.run's timeout would
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"], BERTJAX_KEEP_FREED_MEMORY="0", BERTJAX_HUGE_PAGES="0")
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
            os.dup2(os.open(path, flags), fd)
        script = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve()
