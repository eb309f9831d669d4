"""Whether an interpreter can run the PyTorch sides of the comparisons, asked before any side runs."""

import subprocess
import sys


def require_torch(python: str = sys.executable, what: str = "the PyTorch side", flag: str = "--torch_python",
                  modules: str = "torch, transformers") -> None:
    """SystemExit with one line when `python` cannot import `modules` (or is no interpreter): the
    bertjax sides would run first and the comparison end in a traceback. `flag`: the script's way
    to name another interpreter ("" where it has none)."""
    try:
        found = subprocess.run([python, "-c", f"import {modules}"], capture_output=True).returncode == 0
    except OSError:  # a misspelt --torch_python
        found = False
    if not found:
        other = f", or {flag}=<a Python that has them>" if flag else ""
        raise SystemExit(f"error: {what} cannot run: {python} has no {modules.replace(', ', ' and ')} (pip install "
                         f"-e '.[bench]', the CPU wheel of torch first{other})")
