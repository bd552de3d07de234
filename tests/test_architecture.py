"""The package's layering, read from its source: no import cycles, the state layer (the
engine) imports none of the layers around it and speaks no HTTP, and no module touches
another object's private attributes (the facade, delivery and the server meet through public,
named seams).

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
    assert "pytest_qstash.server.process" in GRAPH["pytest_qstash.server.fixture"]
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


#: Another object's private attributes the package does touch: internals of the standard
#: library or a third-party package with no public way to the same thing, each with why.
PRIVATE_ACCESS_ALLOWED = {
    **{
        ("pytest_qstash.delivery.transports", access): "asyncio has no public 'is the loop idle'"
        for access in (
            "loop._ready",
            "loop._scheduled",
            "loop._ssock",
            "loop._selector",
            "loop._default_executor",
        )
    },
    **{
        ("pytest_qstash.delivery.transports", access): (
            "ThreadPoolExecutor has no public 'is a worker busy'"
        )
        for access in (
            "executor._work_queue",
            "executor._threads",
            "executor._idle_semaphore",
            "executor._idle_semaphore._value",
        )
    },
    ("pytest_qstash.delivery.transports", "exc._request"): (
        "httpx's errors raise on .request when none is set; the field tells without raising"
    ),
    ("pytest_qstash.delivery.transports", "client._transport"): (
        "httpx clients do not expose the transport a test client was built with"
    ),
    ("pytest_qstash.delivery.mounts", "app._transport"): (
        "the same: a mounted httpx client's own transport tells it is a test client"
    ),
    ("pytest_qstash.compat", "mock._requests_not_matched"): (
        "pytest-httpx keeps its unmatched requests there only (read in one module, compat)"
    ),
    ("pytest_qstash.compat", "mock._requests"): "pytest-httpx's recorded requests, the same",
    ("pytest_qstash.compat", "candidate._requests_not_matched"): "the same, found by duck type",
    ("pytest_qstash.httpx2_support", "client_type._transport_for_url"): (
        "the httpx2 client method the interception wraps, as respx wraps httpx's"
    ),
    ("pytest_qstash.sslcache", "httpx._config"): (
        "httpx builds its default TLS context there and exports no function for it"
    ),
    ("pytest_qstash.server.persistence", "os._exit"): (
        "a public function despite its name: a forked child exits without the parent's cleanup"
    ),
    ("pytest_qstash.state.retry", "other._text"): (
        "__eq__ of RetryDelayExpression compares with another of its own class"
    ),
}


def _private_accesses(source: str) -> list[tuple[str, int]]:
    """Where ``source`` reads or writes another object's underscore-prefixed attribute:
    ``x._name`` (and ``getattr``/``setattr``/``hasattr``/``delattr`` with such a name) where
    ``x`` is not ``self``, ``cls`` or ``super()``. Dunder names are everyone's."""
    found: list[tuple[str, int]] = []

    def private(attr: str) -> bool:
        return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))

    def own(value: ast.expr) -> bool:
        if isinstance(value, ast.Name):
            return value.id in ("self", "cls")
        return (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "super"
        )

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and private(node.attr) and not own(node.value):
            found.append((ast.unparse(node), node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and private(node.args[1].value)
            and not own(node.args[0])
        ):
            found.append((f"{ast.unparse(node.args[0])}.{node.args[1].value}", node.lineno))
    return found


def test_the_private_access_check_sees_every_form() -> None:
    source = (
        "class A:\n"
        "    def f(self, b):\n"
        "        self._x = super()._y\n"
        "        b._z = getattr(b, '_w', None)\n"
        "        setattr(cls, '_v', 1)\n"
        "        return b.__class__, b.public\n"
    )
    assert _private_accesses(source) == [("b._z", 4), ("b._w", 4)]


def test_no_module_touches_another_objects_private_attributes() -> None:
    # Modules talk through public, named seams; what truly has none is listed, with why.
    seen = set()
    wrong = []
    for name, (path, _) in MODULES.items():
        for access, line in _private_accesses(path.read_text(encoding="utf-8")):
            if (name, access) in PRIVATE_ACCESS_ALLOWED:
                seen.add((name, access))
            else:
                wrong.append(f"{name}:{line} touches {access}")
    assert not wrong, "\n".join(wrong)
    stale = sorted(set(PRIVATE_ACCESS_ALLOWED) - seen)
    assert not stale, f"allowed but no longer there (drop them from the list): {stale}"
