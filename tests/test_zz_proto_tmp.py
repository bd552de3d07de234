from __future__ import annotations
import pytest
from qstash import QStash
import os
from tests.workflow_apps import Journal, fastapi_workflow_app, flask_workflow_app, stock_app, STOCK_URL

APP = "https://shop.test"

@pytest.mark.qstash(start="2026-01-01T00:00:00Z")
@pytest.mark.parametrize("factory", [fastapi_workflow_app, flask_workflow_app])
def test_proto(qstash, factory):
    j = Journal()
    qstash.mount(APP, factory(j))
    qstash.mount(STOCK_URL, stock_app(j))
    ship_at = int(qstash.now.timestamp()) + 3600
    rid = qstash.trigger(f"{APP}/order", {"order": 7, "sku": "A", "qty": 2, "ship_at": ship_at}, headers={"X-Tenant": "acme"})
    print(rid, qstash.runs)
    d = qstash.tick()
    for x in d: print(x, x.response_body[:300])
    d = qstash.advance("2h")
    for x in d: print(x, x.response_body[:300])
    run = qstash.runs[0]
    print(run, run.state, run.steps, j)
    for s in run.steps: print(s, s.created_at, s.resumes_at)
    assert run.state == "RUN_SUCCESS"
