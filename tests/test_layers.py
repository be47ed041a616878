"""The layers, checked from the source (no device needed): imports inside fusion_server
form no circle, streams and fusers see the block context and never the server, and
fusion_server never imports the user layer.

The graph is every `import` and `from ... import` of each module: function-level ones
(they run too) and those under `if TYPE_CHECKING:` (an annotation is a dependency too)
included; `from package import name` counts as an import of the submodule when `name`
is one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "fusion_server"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in (ROOT / PACKAGE).rglob("*.py")}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            for alias in node.names:
                found.add(f"{target}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_circle_inside_fusion_server():
    assert _cycles(_graph()) == []


def test_the_cycle_check_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_streams_and_fusers_never_refer_to_the_server():
    graph = _graph()
    below = [m for m in graph if m.startswith(f"{PACKAGE}.fusers") or m in (f"{PACKAGE}.stream", f"{PACKAGE}.context")]
    assert below
    assert [m for m in below if f"{PACKAGE}.server" in graph[m]] == []
    for m in below:
        text = _modules()[m].read_text()
        assert "FusionServer" not in text, f"{m} names FusionServer"


def test_fusion_server_never_imports_the_user_layer():
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level:
                assert not (node.module or "").startswith("clients"), name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("clients") for a in node.names), name


def test_no_device_code_in_the_user_layer():
    """clients validates, describes and calls; kernels, programs and copies are the
    server's (through its program cache: dumps, counters, build failures)."""
    found = []
    for path in sorted((ROOT / "clients").rglob("*.py")):
        text = path.read_text()
        for needle in ("__kernel", "cl.Program", "enqueue_", "build_kernel", "import pyopencl as cl"):
            if needle in text:
                found.append(f"{path.name}: {needle}")
    assert found == []


def test_the_device_free_tests_run_with_no_opencl_platform():
    """The stream and fuser tests drive a fake block context: run them where no OpenCL
    driver can be found (an empty ICD vendor directory), and check that none was."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OCL_ICD_VENDORS": "/nonexistent", "OCL_ICD_FILENAMES": "", "FUSION_EXPECT_NO_OPENCL": "1"}
    tests = ["tests/test_stream_decisions.py", "tests/test_signatures.py",
             "tests/test_layers.py::test_no_import_circle_inside_fusion_server"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:cov", *tests],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
