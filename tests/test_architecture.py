"""The package's layering, read from its source: no import cycles, and the state layer (the
engine) imports none of the layers around it and speaks no HTTP.

Every import counts, also those under ``TYPE_CHECKING`` and inside functions: a cycle hidden
there still ties the modules together for a reader and for the next refactoring.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_qstash

PACKAGE = Path(pytest_qstash.__file__).parent
NAME = "pytest_qstash"


def _modules() -> dict[str, tuple[Path, bool]]:
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = [NAME, *path.relative_to(PACKAGE).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


MODULES = _modules()


def _imports(name: str) -> dict[str, int]:
    """The package's modules ``name`` imports, each with the line of its first import."""
    path, is_package = MODULES[name]
    package = name if is_package else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target in MODULES and target != name:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                add(submodule if submodule in MODULES else source, node.lineno)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return out


def test_the_graph_sees_every_kind_of_import() -> None:
    # Guards the reader: a TYPE_CHECKING import and one inside a function are edges too.
    assert "pytest_qstash.state.store" in GRAPH["pytest_qstash.state.trigger"]
    assert "pytest_qstash.fake" in GRAPH["pytest_qstash.plugin"]
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [
        ["a", "b", "c"]
    ]


def test_no_import_cycles() -> None:
    described = []
    for component in _cycles(GRAPH):
        edges = [
            f"  {source} -> {target} (line {line})"
            for source in component
            for target, line in sorted(GRAPH[source].items())
            if target in component
        ]
        described.append("cycle among " + ", ".join(component) + ":\n" + "\n".join(edges))
    assert not described, "\n".join(described)


EDGE_LAYERS = (
    "pytest_qstash.api",
    "pytest_qstash.delivery",
    "pytest_qstash.server",
    "pytest_qstash.fake",
    "pytest_qstash.plugin",
    "pytest_qstash.intercept",
)


def test_state_imports_no_outer_layer() -> None:
    wrong = [
        f"{name} imports {target} (line {line})"
        for name in MODULES
        if name.startswith("pytest_qstash.state")
        for target, line in GRAPH[name].items()
        if target.startswith(EDGE_LAYERS)
    ]
    assert not wrong, "\n".join(wrong)


#: What of httpx is wire rather than data: requests, answers, clients and transports.
WIRE = {"Request", "Response", "Client", "AsyncClient", "BaseTransport", "AsyncBaseTransport"}


def test_state_speaks_no_http() -> None:
    # ``httpx.Headers`` is the engine's header type (case-insensitive, multi-valued, bytes
    # kept as sent); the wire types belong to api/ and delivery/.
    wrong = []
    for name, (path, _) in MODULES.items():
        if not name.startswith("pytest_qstash.state"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "httpx"
                and node.attr in WIRE
            ):
                wrong.append(f"{name}:{node.lineno} uses httpx.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "httpx":
                wrong.extend(
                    f"{name}:{node.lineno} imports httpx.{alias.name}"
                    for alias in node.names
                    if alias.name in WIRE
                )
    assert not wrong, "\n".join(wrong)


def test_the_publish_headers_are_read_in_one_module() -> None:
    # Internal publishes build MessageOptions; only the edge reads Upstash-* headers.
    defining = [
        name
        for name, (path, _) in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name == "parse_options"
    ]
    assert defining == ["pytest_qstash.api.publish_headers"]
