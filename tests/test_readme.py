"""Every command in the README and the manual (docs/*.md) is well-formed: each launcher command's
flags, config file and `--config.key=value` overrides are parsed (BERTJAX_CHECK_FLAGS=1:
checked, not run), and the module commands answer --help. The two quick-start commands run for
real (CI runs the tests; the demo is run before each landing), and commands for TPU VMs are
checked for their subcommands. The README stays a short manual that maps every page of docs/,
and the relative links between the README, docs/ and benchmarks/ resolve, anchors included."""

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 250


def manual_files() -> list[str]:
    """The README first (its first commands are the quick start), then docs/*.md in name order."""
    docs = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return ["README.md", *docs]


def _read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def commands_in(path: str) -> list[str]:
    """The commands in a file's ```bash blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", _read(path), flags=re.S):
        block = re.sub(r"\\\n\s*", " ", block)
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def readme_commands() -> list[str]:
    """The commands of the README's and then docs/*.md's ```bash blocks (see commands_in)."""
    return [command for path in manual_files() for command in commands_in(path)]


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
    assert commands_in("README.md")[:2] == COMMANDS[:2]
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert f.read().strip().splitlines()[-1] == "bash tests/run_tests.sh"


@pytest.mark.parametrize("command", [c for c in COMMANDS if _python_argv(c)])
def test_python_commands_parse(launchers, command, tmp_path):
    argv = _python_argv(command)
    env = {**os.environ, "BERTJAX_CHECK_FLAGS": "1", "JAX_PLATFORMS": "cpu"}
    if argv[1] == "-m":
        result = subprocess.run(argv[:3] + ["--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    else:  # a script: forked (tests/conftest.py), as the launchers' other refusals and checks are
        result = launchers.run(argv[1:], env, cwd=ROOT, timeout=120)
        assert "flags and config parse" in result.stdout, f"{command}\n{result.stdout[-2000:]}"  # parsed, not run
    assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("bash launch/tpu_vm.sh")])
def test_tpu_vm_commands_use_existing_subcommands(command):
    subcommand = shlex.split(command)[2]
    with open(os.path.join(ROOT, "launch", "tpu_vm.sh")) as f:
        script = f.read()
    assert re.search(rf"^\s+{subcommand}\)", script, flags=re.M), f"tpu_vm.sh has no '{subcommand}' subcommand"


def test_the_python_example_of_using_a_trained_model_runs(minilm_classifier_run, small_pretrained_run, capsys):
    """The manual's Python example (docs/using-a-model.md, From Python), run on the fixture runs
    in place of its paths."""
    path = os.path.join("docs", "using-a-model.md")
    section = re.split(r"^## From Python$", _read(path), maxsplit=1, flags=re.M)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    code = code.replace('"/tmp/mine"', repr(minilm_classifier_run)).replace('"workdir/demo/pretrain"',
                                                                            repr(small_pretrained_run))
    exec(compile(code, path, "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["good", "bad"]
    assert all(0.5 < float(line.split()[1]) <= 1 for line in lines[:2])
    masks = [eval(line) for line in lines[2:]]  # noqa: S307 -- the example's own printed lists
    assert [len(m) for m in masks] == [1, 2] and all(len(mask) == 3 for m in masks for mask in m)


def test_the_readme_is_a_short_manual_that_maps_every_page_of_docs():
    readme = _read("README.md")
    assert len(readme.splitlines()) <= README_MAX_LINES, "the README is the short manual: move details to docs/"
    pages = [p for p in manual_files() if p != "README.md"]
    assert pages, "docs/ holds the manual"
    unmapped = [p for p in pages if f"]({p.replace(os.sep, '/')})" not in readme]
    assert not unmapped, f"pages of docs/ the README's map does not link: {unmapped}"


# -- Links. ---------------------------------------------------------------------------------------

LINKED_FILES = [*manual_files(), os.path.join("benchmarks", "README.md"),
                *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "benchmarks", "log", "*.md")))]


def _outside_code(text: str) -> str:
    """The text without its fenced code blocks (a `# comment` there is no heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(path: str) -> set[str]:
    """The #anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped,
    spaces as hyphens, -1, -2, ... on repeats)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*$", _outside_code(_read(path)), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


@pytest.mark.parametrize("path", LINKED_FILES)
def test_relative_links_resolve(path):
    """Every relative link of the README, docs/ and benchmarks/ names a file that exists and,
    into a Markdown file, a heading it has."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _outside_code(_read(path))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(os.path.join(ROOT, linked)):
            broken.append(f"{target}: no {linked}")
        elif anchor and linked.endswith(".md") and anchor not in anchors(linked):
            broken.append(f"{target}: {linked} has no heading #{anchor}")
    assert not broken, f"{path}: {broken}"
