"""Dependency checks for .ci/run (run with the CI virtualenv's python, from the repository root).

python .ci/deps.py lowest-pins
    Every `>=` dependency pyproject.toml declares (runtime, `test`, `fast`) is pinned in
    .ci/constraints-lowest.txt to exactly its declared minimum, and nothing else is pinned,
    so the lowest-versions run cannot drift from what pyproject.toml promises.

python .ci/deps.py examples-closure PIP_FREEZE_FILE
    Reads what installing examples/requirements.txt alone put in a virtualenv (`pip freeze`
    output) and fails if that brought in a dependency of ours the examples' own stack does not
    need: there, it would hide a runtime dependency missing from pyproject.toml in the
    plain-install run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOWEST = ROOT / ".ci" / "constraints-lowest.txt"
EXAMPLES = ROOT / "examples" / "requirements.txt"
PINNED_SECTIONS = ("fast", "test")  # plus the runtime dependencies; `dev`, `docs`: tools

# Ours, but needed by the examples' own stack, so any project using them has them anyway: the
# qstash SDK depends on httpx and pyjwt, pytest-asyncio on pytest, httpx and Starlette on anyio.
SHARED_WITH_THE_EXAMPLES = {"httpx", "pyjwt", "pytest", "anyio"}


def _project() -> dict[str, object]:
    with PYPROJECT.open("rb") as file:
        project: dict[str, object] = tomllib.load(file)["project"]
    return project


def _requirements(lines: list[str]) -> list[Requirement]:
    found = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            found.append(Requirement(line))
    return found


def declared_minimums() -> dict[str, Version]:
    """The highest `>=` minimum declared for each package (a package can appear twice)."""
    project = _project()
    extras = project.get("optional-dependencies", {})
    assert isinstance(extras, dict)
    declared = list(project.get("dependencies", []))  # type: ignore[call-overload]
    for section in PINNED_SECTIONS:
        declared += extras.get(section, [])
    minimums: dict[str, Version] = {}
    for requirement in _requirements(declared):
        name = canonicalize_name(requirement.name)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                version = Version(spec.version)
                minimums[name] = max(version, minimums.get(name, version))
    return minimums


def lowest_pins() -> int:
    pins: dict[str, Version] = {}
    problems = []
    for requirement in _requirements(LOWEST.read_text().splitlines()):
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            problems.append(f"{requirement}: pin with == only")
            continue
        pins[canonicalize_name(requirement.name)] = Version(specs[0].version)
    minimums = declared_minimums()
    for name, minimum in sorted(minimums.items()):
        if name not in pins:
            problems.append(f"{name}>={minimum} is declared but not pinned")
        elif pins[name] != minimum:
            problems.append(
                f"{name} is pinned to {pins[name]} but its declared minimum is {minimum}"
            )
    problems += [
        f"{name}=={pins[name]} is pinned but not declared" for name in pins.keys() - minimums.keys()
    ]
    for problem in problems:
        print(f"{LOWEST.relative_to(ROOT)}: {problem}", file=sys.stderr)
    if not problems:
        print(f"{len(pins)} pins, one for each declared minimum")
    return 1 if problems else 0


def examples_closure(freeze: Path) -> int:
    listed = {canonicalize_name(r.name) for r in _requirements(EXAMPLES.read_text().splitlines())}
    project = _project()
    extras = project.get("optional-dependencies", {})
    assert isinstance(extras, dict)
    # The runtime dependencies (and `fast`, which once added the clock and may again add one).
    ours = list(project.get("dependencies", [])) + extras.get("fast", [])  # type: ignore[call-overload]
    ours_names = {canonicalize_name(r.name) for r in _requirements(ours)}
    resolved = {}
    for line in freeze.read_text().splitlines():
        name, _, version = line.partition("==")
        if version:
            resolved[canonicalize_name(name)] = version
    brought = sorted((resolved.keys() & ours_names) - listed - SHARED_WITH_THE_EXAMPLES)
    print(f"{EXAMPLES.relative_to(ROOT)} alone installs {len(resolved)} packages:")
    print("  " + " ".join(f"{name}=={resolved[name]}" for name in sorted(resolved)))
    if brought:
        print(
            f"{EXAMPLES.relative_to(ROOT)} brings in {', '.join(brought)}, which pytest-qstash"
            " declares: the plain-install run could not see one missing from pyproject.toml",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["lowest-pins"]:
        sys.exit(lowest_pins())
    if len(sys.argv) == 3 and sys.argv[1] == "examples-closure":
        sys.exit(examples_closure(Path(sys.argv[2])))
    sys.exit("usage: python .ci/deps.py lowest-pins | examples-closure PIP_FREEZE_FILE")
