"""The endpoint table of docs/api-coverage.md against the API's route table
(``pytest_qstash.wire.api._TABLE``), so neither drifts from the other.

A row's first cell names its endpoints as `` `METHOD /path` `` spans (path parameters in braces,
named as one likes); its third cell is the status. Every route must be in a row, and every
endpoint of a row served as "implemented" must be a route. What answers 501 (not implemented) is
found by asking: every route is called through the fake, and the endpoints answering 501 must
be exactly those of the "not yet" rows.

Run this file (``python tests/test_api_coverage_table.py``) to print the rows to add for routes
the table does not have yet, and the table's endpoints no route serves.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from pytest_qstash import FakeQStash
from pytest_qstash.wire import api

PAGE = Path(__file__).resolve().parent.parent / "docs" / "api-coverage.md"
_SPAN = re.compile(r"`(?:(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) )?(/v2[^`]*)`")


def _normal(path: str) -> str:
    """Parameters as ``{}``, no query, no trailing slash, no ``...``."""
    path = re.sub(r"\{[^}]*\}", "{}", path).partition("?")[0]
    return path.removesuffix("...").rstrip("/")


def route_endpoints() -> set[str]:
    """``METHOD /path`` for every route, optional parts spelled out."""
    found = set()
    for method, pattern, _handler in api._TABLE:
        path = re.sub(r"\(\?P<\w+>(?:[^()]|\([^()]*\))+\)", "{}", pattern)
        variants = [path]
        while any("(?:" in v for v in variants):
            expanded = []
            for variant in variants:
                group = re.search(r"\(\?:([^()]*)\)(\?)?", variant)
                if group is None:
                    expanded.append(variant)
                    continue
                choices = group[1].split("|") + ([""] if group[2] else [])
                expanded += [variant[: group.start()] + c + variant[group.end() :] for c in choices]
            variants = expanded
        found |= {f"{method} {_normal(v.removesuffix('/?'))}" for v in variants}
    return found


def table_rows() -> list[tuple[list[str], list[str], str]]:
    """Per row of the Endpoints table: endpoints with a method, bare paths, status."""
    section = PAGE.read_text(encoding="utf-8").split("## Endpoints", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if not line.startswith("| ") or len(cells) < 3 or cells[0] == "endpoint":
            continue
        spans = _SPAN.findall(cells[0])
        with_method = [f"{method} {_normal(path)}" for method, path in spans if method]
        bare = [_normal(path) for method, path in spans if not method]
        rows.append((with_method, bare, cells[2]))
    return rows


def test_every_route_is_in_the_table() -> None:
    documented = {endpoint for row in table_rows() for endpoint in row[0]}
    missing = sorted(route_endpoints() - documented)
    assert not missing, f"routes missing from {PAGE.name}'s Endpoints table: {missing}"


def test_every_implemented_endpoint_in_the_table_is_a_route() -> None:
    routes = route_endpoints()
    unserved = sorted(
        endpoint
        for with_method, bare, status in table_rows()
        if status != "not yet"
        for endpoint in [*with_method, *bare]
        if endpoint not in routes
    )
    assert not unserved, f"{PAGE.name} lists endpoints no route serves: {unserved}"


def _answered_501(fake: FakeQStash, endpoints: set[str]) -> set[str]:
    """Those of ``endpoints`` (``METHOD /path`` with ``{}`` parameters) the fake answers 501,
    called with ``x`` for each parameter and an empty JSON object."""
    found = set()
    with httpx.Client(
        base_url="https://qstash.upstash.io",
        headers={"Authorization": f"Bearer {fake.token}"},
    ) as http:
        for endpoint in sorted(endpoints):
            method, _, path = endpoint.partition(" ")
            content = b"" if method in ("GET", "HEAD", "DELETE", "OPTIONS") else b"{}"
            answer = http.request(method, path.replace("{}", "x"), content=content)
            if answer.status_code == 501:
                found.add(endpoint)
    return found


def test_what_answers_501_is_what_the_table_says_not_yet(qstash: FakeQStash) -> None:
    not_yet = {
        endpoint
        for with_method, _bare, status in table_rows()
        if status == "not yet"
        for endpoint in with_method
    }
    assert not_yet, "no 'not yet' row names an endpoint: is the table still parsed?"
    answered_501 = _answered_501(qstash, route_endpoints() | not_yet)
    assert answered_501 == not_yet, (
        f"answered 501 but not 'not yet' in {PAGE.name}: {sorted(answered_501 - not_yet)}; "
        f"'not yet' but served: {sorted(not_yet - answered_501)}"
    )


if __name__ == "__main__":
    documented = {endpoint for row in table_rows() for endpoint in row[0]}
    for endpoint in sorted(route_endpoints() - documented):
        print(f"| `{endpoint}` | \u2013 | implemented | |")
    for with_method, bare, status in table_rows():
        for endpoint in [*with_method, *bare]:
            if status != "not yet" and endpoint not in route_endpoints():
                print(f"no route serves `{endpoint}` ({status})")
