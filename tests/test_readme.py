"""Every command in the README is well-formed: each launcher command's flags, config file and
`--config.key=value` overrides are parsed (BERTJAX_CHECK_FLAGS=1: checked, not run), and the
module commands answer --help. The two quick-start commands run for real (CI runs the tests;
the demo is run before each landing), and commands for TPU VMs are checked for their
subcommands."""

import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_commands() -> list[str]:
    """The commands in the README's ```bash blocks, continuation lines joined, comments dropped."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        block = re.sub(r"\\\n\s*", " ", block)
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def _python_argv(command: str) -> list[str] | None:
    """A `python ...` command as argv for this interpreter (None for other commands)."""
    words = shlex.split(command)
    while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value prefixes
        words = words[1:]
    if not words or os.path.basename(words[0]) not in ("python", "python3"):
        return None
    return [sys.executable, *words[1:]]


COMMANDS = readme_commands()


def test_the_readme_has_the_two_quick_start_commands():
    assert COMMANDS[:2] == ["bash launch/demo.sh", "bash tests/run_tests.sh"], COMMANDS[:2]
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert f.read().strip().splitlines()[-1] == "bash tests/run_tests.sh"


@pytest.mark.parametrize("command", [c for c in COMMANDS if _python_argv(c)])
def test_python_commands_parse(command, tmp_path):
    argv = _python_argv(command)
    if argv[1] == "-m":
        argv = argv[:3] + ["--help"]
    env = {**os.environ, "BERTJAX_CHECK_FLAGS": "1", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("bash launch/tpu_vm.sh")])
def test_tpu_vm_commands_use_existing_subcommands(command):
    subcommand = shlex.split(command)[2]
    with open(os.path.join(ROOT, "launch", "tpu_vm.sh")) as f:
        script = f.read()
    assert re.search(rf"^\s+{subcommand}\)", script, flags=re.M), f"tpu_vm.sh has no '{subcommand}' subcommand"


def test_the_python_example_of_using_a_trained_model_runs(minilm_classifier_run, small_pretrained_run, capsys):
    """The README's Python example, run on the fixture runs in place of its paths."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        section = f.read().split("## Using a trained model", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    code = code.replace('"/tmp/mine"', repr(minilm_classifier_run)).replace('"workdir/demo/pretrain"',
                                                                            repr(small_pretrained_run))
    exec(compile(code, "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["good", "bad"]
    assert all(0.5 < float(line.split()[1]) <= 1 for line in lines[:2])
    masks = [eval(line) for line in lines[2:]]  # noqa: S307 -- the example's own printed lists
    assert [len(m) for m in masks] == [1, 2] and all(len(mask) == 3 for m in masks for mask in m)
