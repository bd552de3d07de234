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
    assert "pytest_qstash.server.processes.server" in GRAPH["pytest_qstash.server.fixture"]
    assert "pytest_qstash.testing.fake" in GRAPH["pytest_qstash.testing.pytest_layer"]
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
    "pytest_qstash.wire.api",
    "pytest_qstash.delivery",
    "pytest_qstash.server",
    "pytest_qstash.testing.fake",
    "pytest_qstash.plugin",
    "pytest_qstash.testing.pytest_layer",
    "pytest_qstash.intercept.router",
)


def test_state_imports_no_outer_layer() -> None:
    wrong = [
        f"{name} imports {target} (line {line})"
        for name in MODULES
        if name.startswith("pytest_qstash.engine")
        for target, line in GRAPH[name].items()
        if target.startswith(EDGE_LAYERS)
    ]
    assert not wrong, "\n".join(wrong)


#: What of httpx is wire rather than data: requests, answers, clients and transports.
WIRE = {"Request", "Response", "Client", "AsyncClient", "BaseTransport", "AsyncBaseTransport"}


def test_state_speaks_no_http() -> None:
    # ``httpx.Headers`` is the engine's header type (case-insensitive, multi-valued, bytes
    # kept as sent); the wire types belong to wire/ and delivery/.
    wrong = []
    for name, (path, _) in MODULES.items():
        if not name.startswith("pytest_qstash.engine"):
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
    assert defining == ["pytest_qstash.wire.publish_headers"]


def test_a_requests_options_are_read_and_checked_at_one_edge() -> None:
    # Publish, schedules, DLQ retries, workflow DLQ resumes and the fixture's verbs read a
    # request's options through read_options/read_overrides: the due time is checked there.
    calling = sorted(
        name
        for name, (path, _) in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and _last_name(node.func) == "check_due_in_range"
    )
    assert calling == ["pytest_qstash.wire.publish_headers"]


def test_one_admission_rule() -> None:
    # "May this message start now?" is Store.admission (admission.py, a base of the Store):
    # may_start applies it, the scheduler reads it; neither restates a queue, the global
    # parallelism or a flow key's limits.
    def names(path: Path, function: str) -> set[str]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = next(
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == function
        )
        return {_last_name(node) for node in ast.walk(found) if isinstance(node, ast.Attribute)}

    rule_parts = {"holds", "global_parallelism", "in_flight", "next_start_ms", "may_start"}
    assert "start_ms" in names(ENGINE / "scheduler.py", "due_ms")
    assert not names(ENGINE / "scheduler.py", "due_ms") & rule_parts
    assert "admission" in names(ENGINE / "admission.py", "may_start")
    assert not names(ENGINE / "admission.py", "may_start") & rule_parts


#: Another object's private attributes the package does touch: internals of the standard
#: library or a third-party package with no public way to the same thing, each with why.
PRIVATE_ACCESS_ALLOWED = {
    **{
        ("pytest_qstash.delivery.loop_watch", access): "asyncio has no public 'is the loop idle'"
        for access in (
            "loop._ready",
            "loop._scheduled",
            "loop._ssock",
            "loop._selector",
            "loop._default_executor",
        )
    },
    **{
        ("pytest_qstash.delivery.loop_watch", access): (
            "ThreadPoolExecutor has no public 'is a worker busy'"
        )
        for access in (
            "executor._work_queue",
            "executor._threads",
            "executor._idle_semaphore",
            "executor._idle_semaphore._value",
        )
    },
    ("pytest_qstash.intercept.sdk_retries", "sys._getframe"): (
        "whether the SDK's request loop has an attempt left is in its frame only (a lost "
        "publish answer is simulated only where the SDK will send the publish again)"
    ),
    ("pytest_qstash.testing.simulated_tests", "item._initrequest"): (
        "pytest has no public way to run a test again in place with fresh function fixtures "
        "(shrinking a failing schedule); pytest-rerunfailures does the same"
    ),
    ("pytest_qstash.delivery.network", "exc._request"): (
        "httpx's errors raise on .request when none is set; the field tells without raising"
    ),
    ("pytest_qstash.delivery.test_clients", "client._transport"): (
        "httpx clients do not expose the transport a test client was built with"
    ),
    ("pytest_qstash.delivery.mounts", "app._transport"): (
        "the same: a mounted httpx client's own transport tells it is a test client"
    ),
    ("pytest_qstash.intercept.compat", "mock._requests_not_matched"): (
        "pytest-httpx keeps its unmatched requests there only (read in one module, compat)"
    ),
    (
        "pytest_qstash.intercept.compat",
        "mock._requests",
    ): "pytest-httpx's recorded requests, the same",
    (
        "pytest_qstash.intercept.compat",
        "candidate._requests_not_matched",
    ): "the same, found by duck type",
    ("pytest_qstash.intercept.httpx2_support", "client_type._transport_for_url"): (
        "the httpx2 client method the interception wraps, as respx wraps httpx's"
    ),
    ("pytest_qstash.intercept.sslcache", "httpx._config"): (
        "httpx builds its default TLS context there and exports no function for it"
    ),
    ("pytest_qstash.server.datadir.persistence", "os._exit"): (
        "a public function despite its name: a forked child exits without the parent's cleanup"
    ),
    ("pytest_qstash.engine.retry", "other._text"): (
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
    found = [
        (name, access, line)
        for name, (path, _) in MODULES.items()
        for access, line in _private_accesses(path.read_text(encoding="utf-8"))
    ]
    _assert_only_allowed(found, PRIVATE_ACCESS_ALLOWED, "touches")


def _assert_only_allowed(
    found: list[tuple[str, str, int]], allowed: dict[tuple[str, str], str], verb: str
) -> None:
    """Fail on each (module, access, line) found that ``allowed`` does not list, and on each
    allowed one no longer found (a stale entry hides the next real one)."""
    wrong = [
        f"{name}:{line} {verb} {access}"
        for name, access, line in found
        if (name, access) not in allowed
    ]
    assert not wrong, "\n".join(wrong)
    stale = sorted(set(allowed) - {(name, access) for name, access, _ in found})
    assert not stale, f"allowed but no longer there (drop them from the list): {stale}"


# -- the Store is the one mutator -----------------------------------------------------------
#
# The rule, read from the source (an AST walk, no import, no type checker):
#
# 1. Outside the engine (``pytest_qstash/engine/``), nothing assigns (``=``, ``+=``, an annotated
#    assignment, ``del``, ``setattr(x, "name", ...)``) an attribute ``x.name`` where ``name`` is
#    a public attribute of an engine class (a field its body annotates, or one its methods
#    set on ``self``), unless ``x`` is ``self``/``cls`` or is known, in that function, not to
#    hold engine state: a parameter or local annotated with, or built by calling, a class
#    that is not an engine class, or one of the specs (``SPECS``) the edges build a publish
#    from. An ``x`` of unknown type counts as engine state: the check fails closed.
# 2. Outside the engine, nothing calls a method of a Store collection that is not a reader
#    (``COLLECTION_READERS``), nor assigns or deletes an item of one. A Store collection is
#    an attribute ``Store.__init__`` sets to a container it builds (``self.dlq =
#    DeadLetters()``, ``self.messages = {}``), reached as ``<anything but self>.<that name>``
#    or through a local name bound to such an expression. Fail closed again: a new method of
#    a collection is a mutator for this check until it is listed as a reader.
# 3. Outside the engine, nothing writes an object's ``__dict__`` (assigns it, or calls one of
#    its methods but a reader): state is restored through the engine's own methods.
#
# What truly is not engine state but looks like it is listed, with why (``MUTATION_ALLOWED``).

ENGINE = PACKAGE / "engine"

#: Values the edges build and hand to the Store (a publish's options), never stored state
#: being changed in place: the header edge fills one in field by field.
SPECS = {"MessageOptions", "FlowControl"}

#: Methods of the Store's collections that only read.
COLLECTION_READERS = {
    "get",
    "values",
    "items",
    "keys",
    "copy",
    "membership",
    "of_run",
    "of_event",
    "live",
    "is_third_party_call",
    "target_of",
    "raw_steps",
}

MUTATION_ALLOWED = {
    ("pytest_qstash.testing.pytest_layer", "guard.refused"): (
        "the interception guard's refused calls (session_routers), not engine state"
    ),
    ("pytest_qstash.server.control.client", "event.message"): (
        "a client-side log entry decoded from the server's answer, linked to its message"
    ),
}


def _engine_classes() -> tuple[dict[str, set[str]], set[str]]:
    """Every engine class with its public attributes, and the Store's collections."""
    classes: dict[str, set[str]] = {}
    collections: set[str] = set()
    for path in sorted(ENGINE.rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(cls, ast.ClassDef):
                continue
            attrs = classes.setdefault(cls.name, set())
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    attrs.add(stmt.target.id)
            for method in cls.body:
                if not isinstance(method, ast.FunctionDef):
                    continue
                for node in ast.walk(method):
                    for target in _targets(node):
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            attrs.add(target.attr)
                            if (
                                cls.name == "Store"
                                and method.name == "__init__"
                                and isinstance(node, (ast.Assign, ast.AnnAssign))
                                and node.value is not None
                                and _builds_container(node.value)
                            ):
                                collections.add(target.attr)
    public = {name: {a for a in attrs if not a.startswith("_")} for name, attrs in classes.items()}
    return public, {c for c in collections if not c.startswith("_")}


def _builds_container(value: ast.expr) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp)):
        return True
    return isinstance(value, ast.Call) and _last_name(value.func)[:1].isupper()


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment or ``del`` writes, tuples unpacked."""
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    elif isinstance(node, ast.Delete):
        found = list(node.targets)
    else:
        return []
    out: list[ast.expr] = []
    while found:
        target = found.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            found.extend(target.elts)
        elif isinstance(target, ast.Starred):
            found.append(target.value)
        else:
            out.append(target)
    return out


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _annotated_classes(annotation: ast.expr | None) -> set[str]:
    """The class names an annotation names (``X | None``, ``"X"``, ``list[X]``...)."""
    if annotation is None:
        return set()
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return set()
    return {
        _last_name(node)
        for node in ast.walk(annotation)
        if isinstance(node, (ast.Name, ast.Attribute)) and _last_name(node) != "None"
    }


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a module or function, less those of the functions defined inside it."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, _FUNCTIONS):
            todo.extend(ast.iter_child_nodes(node))
    return out


def _known_types(scope: ast.AST, outer: dict[str, set[str]]) -> dict[str, set[str]]:
    """The classes each name of a function (or module) is annotated with or built by; a
    nested function also knows its enclosing ones' names."""
    known: dict[str, set[str]] = {name: set(types) for name, types in outer.items()}
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = scope.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.annotation is not None:
                known.setdefault(arg.arg, set()).update(_annotated_classes(arg.annotation))
    for node in _own_nodes(scope):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            known.setdefault(node.target.id, set()).update(_annotated_classes(node.annotation))
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _last_name(node.value.func)[:1].isupper()
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    known.setdefault(target.id, set()).add(_last_name(node.value.func))
    return known


def _mutations(
    source: str, classes: dict[str, set[str]], collections: set[str]
) -> list[tuple[str, int]]:
    """Where ``source`` (a module outside the engine) changes engine state itself."""
    state = {name for name in classes if name not in SPECS}
    state_attrs = set().union(*(classes[name] for name in state))
    tree = ast.parse(source)

    def engine_state(base: ast.expr, known: dict[str, set[str]]) -> bool:
        if isinstance(base, ast.Name):
            if base.id in ("self", "cls"):
                return False
            types = known.get(base.id)
            if types and not types & state:
                return False  # known to be something else (a spec, a response, a record)
        return True

    def collection(node: ast.expr, aliases: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in aliases
        return (
            isinstance(node, ast.Attribute)
            and node.attr in collections
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        )

    seen: set[tuple[str, int]] = set()
    scopes: list[tuple[ast.AST, dict[str, set[str]]]] = [(tree, {})]
    while scopes:
        scope, outer = scopes.pop()
        known = _known_types(scope, outer)
        nodes = _own_nodes(scope)
        scopes.extend((node, known) for node in nodes if isinstance(node, _FUNCTIONS))
        aliases = {
            target.id
            for node in nodes
            if isinstance(node, ast.Assign) and collection(node.value, set())
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in nodes:
            for target in _targets(node):
                attribute = (
                    isinstance(target, ast.Attribute)
                    and target.attr in state_attrs
                    and engine_state(target.value, known)
                )
                item = isinstance(target, ast.Subscript) and collection(target.value, aliases)
                namespace = any(
                    isinstance(part, ast.Attribute) and part.attr == "__dict__"
                    for part in ast.walk(target)
                )
                if attribute or item or namespace:
                    seen.add((ast.unparse(target), node.lineno))
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (
                isinstance(func, ast.Name)
                and func.id in ("setattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in state_attrs
                and engine_state(node.args[0], known)
            ):
                seen.add((f"{ast.unparse(node.args[0])}.{node.args[1].value}", node.lineno))
            elif (
                isinstance(func, ast.Attribute)
                and func.attr not in COLLECTION_READERS
                and not func.attr.startswith("__")
                and (
                    collection(func.value, aliases)
                    or (isinstance(func.value, ast.Attribute) and func.value.attr == "__dict__")
                )
            ):
                seen.add((f"{ast.unparse(func)}(...)", node.lineno))
    return sorted(seen, key=lambda item: (item[1], item[0]))


def test_the_mutation_check_sees_every_form() -> None:
    classes = {
        "Message": {"url", "state"},
        "Store": {"dlq", "messages"},
        "MessageOptions": {"retries"},
    }
    source = (
        "def f(store, message, opts: MessageOptions, response: httpx.Response):\n"
        "    message.url = 'x'\n"
        "    store.dlq.delete('1')\n"
        "    store.dlq.get('1')\n"
        "    opts.retries = 2\n"
        "    built = Message()\n"
        "    built.state = 'x'\n"
        "    response.url = 'y'\n"
        "    self.messages.pop('a')\n"
        "    letters = store.dlq\n"
        "    letters.pop('2')\n"
        "    del store.messages['m']\n"
        "    setattr(message, 'state', 'y')\n"
        "    a, message.state = 1, 2\n"
        "    ids.__dict__.update({})\n"
        "    vars_ = ids.__dict__.get('drawn')\n"
    )
    assert _mutations(source, classes, {"dlq", "messages"}) == [
        ("message.url", 2),
        ("store.dlq.delete(...)", 3),
        ("built.state", 7),
        ("letters.pop(...)", 11),
        ("store.messages['m']", 12),
        ("message.state", 13),
        ("message.state", 14),
        ("ids.__dict__.update(...)", 15),
    ]


def test_the_store_collections_are_found() -> None:
    _, collections = _engine_classes()
    assert {"messages", "dlq", "url_groups", "schedules", "flow_keys", "queues"} <= collections
    assert "clock" not in collections  # handed in, not a collection the Store builds


def test_only_the_engine_changes_engine_state() -> None:
    # The API layer asks; the Store and the models' own transitions change state.
    classes, collections = _engine_classes()
    found = [
        (name, access, line)
        for name, (path, _) in MODULES.items()
        if not path.is_relative_to(ENGINE)
        for access, line in _mutations(path.read_text(encoding="utf-8"), classes, collections)
    ]
    _assert_only_allowed(found, MUTATION_ALLOWED, "changes")
