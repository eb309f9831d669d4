"""The package's shape: arrows only down, no import cycle, and task families behind one seam."""

import ast
import collections
import inspect
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _modules():
    """{module name: its parsed source} for every module of bertjax."""
    found = {}
    for directory, _, files in os.walk(os.path.join(ROOT, "bertjax")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                with open(path) as f:
                    found[module] = ast.parse(f.read())
    return found


MODULES = _modules()


def _imports(tree):
    """The bertjax modules a module imports, at its top level or inside functions."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bertjax"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in MODULES else node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("bertjax"))


# package -> the bertjax packages and modules it may import (besides itself)
ALLOWED = {
    "bertjax.runtime": (),
    "bertjax.evaluation": ("bertjax.runtime",),  # (file access: the SQuAD scorer reads gs:// predictions)
    "bertjax.data": ("bertjax.runtime", "bertjax.tokenization", "bertjax.ragged"),
    "bertjax.tasks": ("bertjax.runtime", "bertjax.data", "bertjax.evaluation", "bertjax.models", "bertjax.ragged",
                      "bertjax.tokenization"),
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_lower_packages_import_nothing_above_them(package):
    allowed = (package, *ALLOWED[package])
    upward = sorted({(module, target) for module, tree in MODULES.items() if module.startswith(package)
                     for target in _imports(tree) if not target.startswith(allowed)})
    assert not upward, upward


def test_no_import_cycle():
    """Not even through the imports inside functions (which load lazily, not to break a cycle)."""
    edges = {module: set(_imports(tree)) - {module} for module, tree in MODULES.items()}
    state, path = collections.defaultdict(int), []

    def visit(module):  # depth-first search: 1 = on the current path, 2 = done
        state[module] = 1
        path.append(module)
        for target in edges.get(module, ()):
            if state[target] == 1:
                raise AssertionError(f"import cycle: {' -> '.join(path[path.index(target):] + [target])}")
            if state[target] == 0:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(edges):
        if state[module] == 0:
            visit(module)


def test_no_module_outside_tasks_names_a_family():
    from bertjax import tasks

    names = set(tasks.FAMILIES)
    found = []
    for module, tree in MODULES.items():
        if module.startswith("bertjax.tasks"):
            continue
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        found += [(module, node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings]
    assert not found, found


def test_every_family_is_registered_and_complete():
    import bertjax.tasks as tasks
    from bertjax.tasks.family import Family

    modules = [tasks.choice, tasks.classification, tasks.squad, tasks.tagging]
    assert sorted(module.FAMILY.name for module in modules) == sorted(tasks.FAMILIES)
    abstract = [name for name, member in vars(Family).items()
                if inspect.isfunction(member) and "raise NotImplementedError" in inspect.getsource(member)]
    assert {"load_task", "network", "parse", "predict", "input_keys", "serving_inputs", "serve"} <= set(abstract)
    task_names = []
    for family in tasks.FAMILIES.values():
        missing = [name for name in abstract if getattr(type(family), name) is getattr(Family, name)]
        assert not missing, (family.name, missing)
        assert set(family.own_file_tasks) <= set(family.tasks) and family.hf_architecture.startswith("BertFor")
        task_names += family.tasks
        assert tasks.family_of_task(family.tasks[0]) is family
        assert tasks.family_of_architecture(family.hf_architecture) is family
    assert len(task_names) == len(set(task_names))  # a task name picks one family
    with pytest.raises(ValueError, match="not a known task"):
        tasks.family_of_task("sqaud")
