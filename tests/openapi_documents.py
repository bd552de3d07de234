"""Upstash's OpenAPI documents of the QStash and Workflow APIs, read for the tests that hold our
answers to them (``test_openapi_documents.py``).

The documents are Upstash's and are not shipped here: they are read from
``shared/spec/upstash-openapi/`` beside the repository (or beside one of its parent folders),
where CI lays them. ``DOCUMENTS_DIR`` is None when they are absent.

Where a document is wrong, the tests follow the SDKs: each erratum is a named patch below,
applied to the document as loaded, and listed in docs/fidelity.md ("Errata in Upstash's
OpenAPI documents"). A patch first checks that the erratum is still there, so a corrected
document fails loudly ("remove the patch") instead of being patched blindly.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from jsonschema import Draft202012Validator, validators
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

NAMES = ("qstash", "workflow")
_SUBDIR = Path("shared") / "spec" / "upstash-openapi"
_ROOT = Path(__file__).resolve().parent.parent
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def _find_dir() -> Path | None:
    for folder in _ROOT.parents:
        candidate = folder / _SUBDIR
        if all((candidate / f"{name}.yaml").is_file() for name in NAMES):
            return candidate
    return None


DOCUMENTS_DIR = _find_dir()
ABSENT = f"Upstash's OpenAPI documents are absent: no {_SUBDIR}/ beside the repository"

Doc = dict[str, Any]


# -- errata ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Erratum:
    document: str
    name: str
    patch: Callable[[Doc], None]


ERRATA: list[Erratum] = []


def erratum(document: str) -> Callable[[Callable[[Doc], None]], Callable[[Doc], None]]:
    def register(patch: Callable[[Doc], None]) -> Callable[[Doc], None]:
        ERRATA.append(Erratum(document, patch.__name__, patch))
        return patch

    return register


class ErratumGone(AssertionError):
    """A patched erratum is no longer in the document: Upstash fixed it, drop the patch."""


def _expect(condition: bool, name: str) -> None:
    if not condition:
        raise ErratumGone(f"erratum {name!r} is no longer in the document: remove its patch")


def _json_schema(doc: Doc, path: str, method: str, status: str) -> Doc:
    schema: Doc = doc["paths"][path][method]["responses"][status]["content"]["application/json"][
        "schema"
    ]
    return schema


#: What a URL-group publish answers: an array of ``{messageId, url}``.
_GROUP_ITEMS = {
    "type": "array",
    "items": {"$ref": "#/components/schemas/PublishToUrlGroupResponse"},
}


@erratum("qstash")
def publish_answer_one_of_matches_every_object(doc: Doc) -> None:
    """Publish and enqueue answer ``oneOf`` two objects, neither of which requires a
    property: every object matches both, so no answer can validate. And a URL-group publish
    answers an array of ``{messageId, url}`` (qstash-py's ``parse_publish_response``,
    qstash-js), not an object with ``messages``."""
    for path in ("/v2/publish/{destination}", "/v2/enqueue/{queueName}/{destination}"):
        schema = _json_schema(doc, path, "post", "200")
        alternatives = schema.get("oneOf", [])
        _expect(
            len(alternatives) == 2 and "messages" in alternatives[1].get("properties", {}),
            "publish_answer_one_of_matches_every_object",
        )
        alternatives[1] = copy.deepcopy(_GROUP_ITEMS)


@erratum("qstash")
def batch_answer_items_are_never_arrays(doc: Doc) -> None:
    """A batch item sent to a URL group answers, in its place of the array, the array a
    URL-group publish answers (qstash-py parses each item as a publish answer); the document
    allows only ``PublishResponse`` objects."""
    schema = _json_schema(doc, "/v2/batch", "post", "200")
    items = schema.get("items", {})
    _expect(
        items == {"$ref": "#/components/schemas/PublishResponse"},
        "batch_answer_items_are_never_arrays",
    )
    schema["items"] = {"oneOf": [items, copy.deepcopy(_GROUP_ITEMS)]}


@erratum("qstash")
def log_state_spelled_cancelled(doc: Doc) -> None:
    """A log entry's ``state`` enum spells ``CANCELLED``; QStash and the SDKs (qstash-py's
    ``LogState.CANCELED``, qstash-js) spell it ``CANCELED``."""
    enum = doc["components"]["schemas"]["LogEntry"]["properties"]["state"]["enum"]
    _expect("CANCELLED" in enum and "CANCELED" not in enum, "log_state_spelled_cancelled")
    enum[enum.index("CANCELLED")] = "CANCELED"


@erratum("qstash")
def log_state_filter_lacks_failed(doc: Doc) -> None:
    """The ``state`` filter of ``GET /v2/logs`` lists ``FAILED`` in its description but not in
    its enum (and spells ``CANCELLED``): generated requests would never ask for failed
    messages. Both spellings of the cancelled state are accepted."""
    (parameter,) = [
        p for p in doc["paths"]["/v2/logs"]["get"]["parameters"] if p["name"] == "state"
    ]
    enum = parameter["schema"]["enum"]
    _expect("FAILED" not in enum, "log_state_filter_lacks_failed")
    enum += ["FAILED", "CANCELED"]


@erratum("workflow")
def flow_control_wait_list_spelled_waitlist(doc: Doc) -> None:
    """The Workflow document's ``FlowControlKey`` spells ``waitlistSize``; the QStash document
    and the SDKs (qstash-py's ``wait_list_size`` reads ``waitListSize``) spell
    ``waitListSize``, as the answer does."""
    properties = doc["components"]["schemas"]["FlowControlKey"]["properties"]
    _expect(
        "waitlistSize" in properties and "waitListSize" not in properties,
        "flow_control_wait_list_spelled_waitlist",
    )
    properties["waitListSize"] = properties.pop("waitlistSize")


@erratum("workflow")
def flow_control_get_pasted_under_keys_rotate(doc: Doc) -> None:
    """``/v2/keys/rotate`` carries a second operation, ``GET`` "Get Flow Control Key", with a
    ``flowControlKey`` path parameter that path does not have: the flow-control operation
    pasted under the wrong path (it is documented at ``/v2/flowControl/{flowControlKey}``)."""
    item = doc["paths"]["/v2/keys/rotate"]
    _expect(
        item.get("get", {}).get("summary") == "Get Flow Control Key",
        "flow_control_get_pasted_under_keys_rotate",
    )
    del item["get"]


@erratum("workflow")
def bulk_cancel_requires_workflow_url(doc: Doc) -> None:
    """``DELETE /v2/workflows/runs`` marks ``workflowUrl`` required, while the same operation
    says run ids alone select the runs, and the SDKs cancel by ``workflowRunIds`` alone (or
    every run, with no filter)."""
    (parameter,) = [
        p
        for p in doc["paths"]["/v2/workflows/runs"]["delete"]["parameters"]
        if p["name"] == "workflowUrl"
    ]
    _expect(parameter.get("required") is True, "bulk_cancel_requires_workflow_url")
    parameter["required"] = False


# -- loading --------------------------------------------------------------------------------
_URI = "urn:upstash-openapi:"


@functools.cache
def load(name: str) -> Document:
    """The named document, errata patched; a session loads each once."""
    assert DOCUMENTS_DIR is not None, ABSENT
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with (DOCUMENTS_DIR / f"{name}.yaml").open(encoding="utf-8") as file:
        raw: Doc = yaml.load(file, Loader=loader)
    for item in ERRATA:
        if item.document == name:
            item.patch(raw)
    return Document(name, raw)


def _pointer(*parts: str) -> str:
    return "/".join(part.replace("~", "~0").replace("/", "~1") for part in parts)


class Document:
    """One patched document: its operations, and the check of an answer against them."""

    def __init__(self, name: str, raw: Doc) -> None:
        self.name = name
        self.raw = raw
        self._uri = _URI + name
        resource = Resource.from_contents(raw, default_specification=DRAFT202012)
        self._registry: Registry[Any] = Registry().with_resource(self._uri, resource)

    def operations(self) -> list[str]:
        """Every operation as ``"METHOD /path/{template}"``, in the document's order."""
        return [
            f"{method.upper()} {path}"
            for path, item in self.raw["paths"].items()
            for method in item
            if method in HTTP_METHODS
        ]

    def problems(self, operation: str, response: httpx.Response) -> list[str]:
        """How ``response`` differs from what the document gives for ``operation``: a status
        it does not list, or a JSON body its schema refuses (empty when it matches)."""
        method, path = operation.split(" ", 1)
        responses = self.raw["paths"][path][method.lower()]["responses"]
        status = str(response.status_code)
        if status not in responses:
            return [
                f"status {status} is not documented (documented: {', '.join(responses)}); "
                f"body: {response.text[:300]}"
            ]
        content = responses[status].get("content") or {}
        if "application/json" not in content or "schema" not in content["application/json"]:
            return []  # no body documented: nothing more to hold the answer to
        try:
            body = response.json()
        except ValueError:
            return [f"status {status} documents a JSON body; got {response.text[:300]!r}"]
        pointer = _pointer(
            "paths", path, method.lower(), "responses", status, "content", "application/json"
        )
        validator = Draft202012Validator(
            {"$ref": f"{self._uri}#/{pointer}/schema"}, registry=self._registry
        )
        return [
            f"{'/'.join(map(str, error.absolute_path)) or '(the body)'}: {error.message}"
            for error in sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
        ]

    def absent(self, operation: str, response: httpx.Response) -> set[str]:
        """The names of the documented properties that objects of ``response``'s JSON body
        leave out: the documents require almost nothing, so a field missing from an answer
        fails no schema."""
        method, path = operation.split(" ", 1)
        status = str(response.status_code)
        pointer = _pointer(
            "paths", path, method.lower(), "responses", status, "content", "application/json"
        )
        found: set[str] = set()
        checker = _recording(found)(
            {"$ref": f"{self._uri}#/{pointer}/schema"}, registry=self._registry
        )
        for _ in checker.iter_errors(response.json()):
            pass  # problems() reports these; only the absent properties are wanted here
        return found


def _recording(found: set[str]) -> Any:
    """A validator class that also records, in ``found``, each documented property an object
    of the instance does not have."""
    check_properties = Draft202012Validator.VALIDATORS["properties"]

    def properties(validator: Any, documented: Doc, instance: Any, schema: Doc) -> Any:
        yield from check_properties(validator, documented, instance, schema)
        if validator.is_type(instance, "object"):
            # The path of the object being checked is not known here: the caller names the
            # answer, and the property names tell the rest.
            found.update(name for name in documented if name not in instance)

    return validators.extend(Draft202012Validator, {"properties": properties})


def describe(response: httpx.Response) -> str:
    """A response in a line, for assertion messages."""
    try:
        body = json.dumps(response.json())[:600]
    except ValueError:
        body = response.text[:600]
    return f"{response.request.method} {response.request.url} -> {response.status_code} {body}"
