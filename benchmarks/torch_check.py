"""Whether an interpreter can run the PyTorch sides of the comparisons, asked before any side runs."""

import subprocess
import sys


def require_torch(python: str = sys.executable, what: str = "the PyTorch side", flag: str = "--torch_python") -> None:
    """SystemExit with one line when `python` cannot import torch and transformers: the bertjax
    sides would run first and the comparison end in a traceback. `flag`: the script's way to
    name another interpreter ("" where it has none)."""
    found = subprocess.run([python, "-c", "import torch, transformers"], capture_output=True).returncode == 0
    if not found:
        other = f", or {flag}=<a Python that has them>" if flag else ""
        raise SystemExit(f"error: {what} cannot run: {python} has no torch and transformers (pip install -e "
                         f"'.[bench]', the CPU wheel of torch first{other})")
