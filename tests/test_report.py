"""The "qstash" section a failing test's report gets: what was published, tried, refused."""

from __future__ import annotations

import os
from typing import Any

import pytest
from inner_pytest import run_inner


@pytest.fixture(autouse=True)
def _quiet_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def test_a_refused_delivery_adds_the_signature_hint(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os

        import httpx
        from qstash import QStash


        def test_welcome_email(qstash):
            # The app refuses the request, as it does when a signature does not verify.
            qstash.mount("https://app.test", lambda request: httpx.Response(401, text="bad sig"))
            QStash(os.environ["QSTASH_TOKEN"]).message.publish(url="https://app.test/hook")
            qstash.tick()
            assert qstash.messages[0].state == "DELIVERED"
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- qstash -*",
            "*msg_* POST https://app.test/hook RETRY retried=1/3*",
            "*attempt retried=0 -> 401 'bad sig'",
            "hint: a delivery was refused (400/401/403)*",
        ]
    )


def test_a_test_that_never_used_the_fake_gets_no_section(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_unrelated(qstash):
            assert 1 == 2
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.no_fnmatch_line("*- qstash -*")


def test_workflow_runs_are_listed_with_their_steps(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from fastapi import FastAPI
        from upstash_workflow.fastapi import Serve

        app = FastAPI()
        serve = Serve(app)


        @serve.post("/flow")
        async def flow(context):
            async def double():
                return 2

            await context.run("double", double)


        def test_flow(qstash):
            qstash.mount("https://app.test", app)
            qstash.trigger("https://app.test/flow")
            qstash.tick()
            assert qstash.runs[0].state == "RUN_FAILED"
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*workflow run wfr_* at https://app.test/flow RUN_SUCCESS; steps: double (Run)"]
    )


def _run(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makepyfile(source)
    return run_inner(pytester)


def test_a_fixture_failing_after_the_fake_was_used_gets_the_section(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        """
        import os

        import pytest
        from qstash import QStash


        @pytest.fixture
        def seeded(qstash):
            QStash(os.environ["QSTASH_TOKEN"]).message.publish(url="https://app.test/seed")
            raise RuntimeError("fixture broke")


        def test_uses_seeded(seeded):
            pass
        """,
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*- qstash -*", "*msg_* POST https://app.test/seed CREATED*"])


def test_a_failing_teardown_gets_the_section_once_per_test(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        import os

        import pytest
        from qstash import QStash


        @pytest.fixture
        def breaks_at_teardown(qstash):
            yield
            raise RuntimeError("teardown broke")


        def test_only_teardown_fails(breaks_at_teardown, qstash):
            QStash(os.environ["QSTASH_TOKEN"]).message.publish(url="https://app.test/one")


        def test_call_and_teardown_fail(breaks_at_teardown, qstash):
            QStash(os.environ["QSTASH_TOKEN"]).message.publish(url="https://app.test/two")
            assert False
        """,
    )
    result.assert_outcomes(passed=1, failed=1, errors=2)
    out = result.stdout.str()
    # One section each: at teardown for the first; at the call (not again at teardown) for
    # the second.
    assert out.count("- qstash -") == 2
    assert out.count("https://app.test/one CREATED") == 1
    assert out.count("https://app.test/two CREATED") == 1


def test_a_rejected_publish_the_app_swallowed_is_listed(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        import os

        from qstash import QStash
        from qstash.errors import QStashError


        def test_signup(qstash):
            client = QStash(os.environ["QSTASH_TOKEN"])
            qstash.fail_next("publish", status=503)
            for _ in range(2):
                try:  # the app logs and moves on
                    client.message.publish(url="https://app.test/welcome", delay="10 minutes")
                except QStashError:
                    pass
            assert qstash.messages, "the welcome email was never scheduled"
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- qstash -*",
            "0 message(s), 0 delivery attempt(s), 0 in the DLQ, 2 rejected API call(s)",
            "rejected API calls*",
            "  *T* POST /v2/publish/https://app.test/welcome -> 503 *(injected by fail_next)",
            "  *T* POST /v2/publish/https://app.test/welcome -> 400 *Upstash-Delay*",
        ]
    )


def test_the_store_keeps_the_newest_50_rejected_calls(qstash: Any) -> None:
    from qstash import QStash
    from qstash.errors import QStashError

    client = QStash(os.environ["QSTASH_TOKEN"])
    for n in range(60):
        with pytest.raises(QStashError):
            client.message.get(f"msg_missing_{n}")
    calls = list(qstash.store.api_errors)
    assert (len(calls), qstash.store.api_errors.total) == (50, 60)
    assert calls[0].path == "/v2/messages/msg_missing_10"
    assert (calls[-1].method, calls[-1].status) == ("GET", 404)


def test_a_signature_error_raised_by_the_receiver_adds_the_hint(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        """
        import os

        import pytest
        from qstash import QStash, Receiver


        def handler(request):
            # Keys that are not the fake's: verification fails as with a stale secret.
            stale = "sig_stale_" + "a" * 32
            receiver = Receiver(current_signing_key=stale, next_signing_key=stale)
            receiver.verify(
                signature=request.headers["upstash-signature"],
                body=request.content.decode(),
                url=str(request.url),
            )


        @pytest.mark.qstash(raise_app_exceptions=False)
        def test_hook(qstash):
            qstash.mount("https://app.test", handler)
            QStash(os.environ["QSTASH_TOKEN"]).message.publish(url="https://app.test/hook")
            qstash.tick()
            assert qstash.messages[0].state == "DELIVERED"
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*attempt retried=0 -> 500 (SignatureError: *",
            "hint: the app could not verify a delivery's signature. If the app verifies*",
        ]
    )
    result.stdout.no_fnmatch_line("*refused (400/401/403)*")


def test_a_workflow_refusing_the_signature_adds_the_hint(pytester: pytest.Pytester) -> None:
    # upstash-workflow answers a 500 (not a 4xx) when the signature does not verify.
    result = _run(
        pytester,
        """
        from fastapi import FastAPI
        from qstash import Receiver
        from upstash_workflow.fastapi import Serve

        app = FastAPI()
        serve = Serve(app)
        stale = "sig_stale_" + "a" * 32


        @serve.post("/order", receiver=Receiver(current_signing_key=stale, next_signing_key=stale))
        async def order(context):
            async def step():
                return 1

            await context.run("step", step)


        def test_order(qstash):
            qstash.mount("https://shop.test", app)
            qstash.trigger("https://shop.test/order", {"id": 1})
            qstash.tick()
            assert qstash.runs[0].state == "RUN_SUCCESS"
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "workflow run wfr_* at https://shop.test/order is retrying step 1, its first step: "
            "500 WorkflowError: Failed to verify that the Workflow request comes from*",
            "    *retried=0 -> 500 WorkflowError: Failed to verify*",
            "hint: the app could not verify a delivery's signature. If the app verifies*",
        ]
    )


def test_a_runaway_shows_the_first_and_the_newest_messages(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        import os

        import pytest
        from qstash import QStash

        client = QStash(os.environ["QSTASH_TOKEN"])


        def handler(request):
            n = int(request.url.params["n"])
            client.message.publish(url=f"https://app.test/loop?n={n + 1}")


        @pytest.mark.qstash(max_deliveries_per_instant=40)
        def test_loop(qstash):
            qstash.mount("https://app.test", handler)
            client.message.publish(url="https://app.test/loop?n=0")
            qstash.tick()
        """,
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "41 message(s)" in out
    shown = [n for n in range(45) if f"/loop?n={n} " in out]
    assert shown == [*range(10), *range(21, 41)]
    result.stdout.fnmatch_lines(["*/loop?n=9 *", "  ... 11 more message(s) ...", "*/loop?n=21 *"])


def test_message_lines_say_why_and_where_a_message_ended(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        import os

        import httpx
        from qstash import QStash


        def handler(request):
            if request.url.path == "/charge":
                return httpx.Response(489, headers={"Upstash-NonRetryable-Error": "true"})
            return 200


        def test_charge(qstash):
            qstash.mount("https://app.test", handler)
            client = QStash(os.environ["QSTASH_TOKEN"])
            client.message.publish(
                url="https://app.test/charge",
                callback="https://app.test/each",
                failure_callback="https://app.test/failed",
            )
            client.message.publish(url="https://app.test/later", delay="1h")
            qstash.tick()
            assert qstash.dlq == []
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*msg_* POST https://app.test/charge FAILED retried=0/3 dlq_id=* body=''",
            "*attempt retried=0 -> 489 non-retryable (489 + Upstash-NonRetryable-Error)",
            "*msg_* POST https://app.test/later CREATED retried=0/3 due=*T*:00* body=''",
        ]
    )
    section = result.stdout.str().split("- qstash -", 1)[1].splitlines()
    each = next(line for line in section if "POST https://app.test/each" in line)
    failed = next(line for line in section if "POST https://app.test/failed" in line)
    assert "[callback for msg_" in each
    assert "[failure callback for msg_" in failed
    # A finished message's not-before is its last attempt's time: not shown as due.
    charge = next(line for line in section if "POST https://app.test/charge" in line)
    assert "due=" not in charge
    assert "due=" not in each


def test_schedules_are_listed_with_the_messages_they_produced(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        import os

        from qstash import QStash


        def test_reports(qstash):
            qstash.mount("https://app.test", lambda request: 200)
            client = QStash(os.environ["QSTASH_TOKEN"])
            client.schedule.create(
                destination="https://app.test/daily", cron="0 9 * * *", schedule_id="daily"
            )
            client.schedule.create(
                destination="https://app.test/hourly", cron="0 * * * *", schedule_id="hourly"
            )
            client.schedule.pause("hourly")
            qstash.advance("3d")
            assert False, "look at the report"
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*, 2 schedule(s)",
            "schedules:",
            "  daily POST https://app.test/daily cron='0 9 * * *' next_run=*T09:00:00+00:00 "
            "produced 3 message(s)",
            "  hourly POST https://app.test/hourly cron='0 * * * *' paused produced 0 message(s)",
        ]
    )


def test_a_time_beyond_year_9999_is_shown_raw(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        import os

        from qstash import QStash


        def test_far(qstash):
            QStash(os.environ["QSTASH_TOKEN"]).message.publish(url="https://app.test/far")
            # What a huge Upstash-Not-Before once stored.
            qstash.messages[0].not_before_ms = 10**17
            assert False
        """,
    )
    result.assert_outcomes(failed=1)
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*far CREATED * due=100000000000000000ms-since-epoch (out of*"])


def test_a_bug_in_the_report_becomes_one_line(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        def test_broken(qstash):
            qstash.store.schedules["odd"] = object()  # what the report cannot read
            assert False
        """,
    )
    result.assert_outcomes(failed=1)
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*- qstash -*", "qstash report failed: AttributeError: *"])


def test_a_run_triggered_at_a_plain_endpoint_is_called_stalled(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        from fastapi import FastAPI

        app = FastAPI()


        @app.post("/order")  # not a workflow route: a typo'd path, or serve() forgotten
        async def order():
            return {"ok": True}


        def test_order(qstash):
            qstash.mount("https://shop.test", app)
            qstash.trigger("https://shop.test/order", {"id": 1})
            qstash.advance("1h")
            assert qstash.runs[0].state == "RUN_SUCCESS"
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*workflow run wfr_* at https://shop.test/order RUN_STARTED; steps: none yet",
            "*stalled: the last delivery was answered 2xx without Upstash-Workflow-Sdk-Version*",
        ]
    )


FAILING_WORKFLOW = """
from fastapi import FastAPI
from upstash_workflow.fastapi import Serve

app = FastAPI()
serve = Serve(app)


@serve.post("/charge", retries=2)
async def charge(context):
    async def reserve():
        return "reserved"

    async def pay():
        raise RuntimeError("card declined")

    await context.run("reserve", reserve)
    await context.run("pay", pay)
"""


def test_a_failed_workflow_run_names_its_failing_step_first(pytester: pytest.Pytester) -> None:
    # The failed message carries step 'reserve' (its delivery runs the step after it): the
    # report must not read as if 'reserve' failed.
    result = _run(
        pytester,
        FAILING_WORKFLOW
        + """

def test_checkout(qstash):
    qstash.mount("https://shop.test", app)
    qstash.trigger("https://shop.test/charge", {"order": 7})
    qstash.drain()
    assert qstash.runs[0].state == "RUN_SUCCESS"
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- qstash -*",
            "workflow run wfr_* at https://shop.test/charge failed at step 2, 'pay' (Run): "
            "500 RuntimeError: card declined",
            "  3 attempt(s) of msg_* (retried=2/2), now in the DLQ as dlq_id=*:",
            "    *+00:00 retried=0 -> 500 RuntimeError: card declined",
            "    *+00:00 retried=1 -> 500 RuntimeError: card declined",
            "    *+00:00 retried=2 -> 500 RuntimeError: card declined",
            "  steps that succeeded before it: reserve (Run)",
            "virtual time now: *",
            "2 message(s), 4 delivery attempt(s), 1 in the DLQ",
            "  msg_* POST https://shop.test/charge DELIVERED retried=0/3 [[]run wfr_*: start] *",
            "  msg_* POST https://shop.test/charge FAILED retried=2/2 dlq_id=* "
            "[[]run wfr_*: carries 'reserve', runs the step after it] body=*",
            "    3 attempt(s), shown first, above",
            "  workflow run wfr_* at https://shop.test/charge RUN_FAILED at step 2, 'pay' (Run) "
            "(shown first, above); steps: reserve (Run)",
        ]
    )


def test_a_workflow_step_being_retried_is_shown_first_too(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        FAILING_WORKFLOW
        + """

def test_checkout(qstash):
    qstash.mount("https://shop.test", app)
    qstash.trigger("https://shop.test/charge", {"order": 7})
    qstash.tick()
    assert qstash.runs[0].state == "RUN_SUCCESS"
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- qstash -*",
            "workflow run wfr_* at https://shop.test/charge is retrying step 2, 'pay' (Run): "
            "500 RuntimeError: card declined",
            "  1 attempt(s) of msg_* (retried=1/2), next attempt due *:",
            "  steps that succeeded before it: reserve (Run)",
        ]
    )


def test_without_the_sdks_log_the_failing_step_is_placed_by_its_neighbour(
    pytester: pytest.Pytester,
) -> None:
    # The name comes from what upstash-workflow logs; with that logger silenced the report
    # still says which step failed, by its position.
    result = _run(
        pytester,
        FAILING_WORKFLOW
        + """

import logging


def test_checkout(qstash, monkeypatch):
    # The inner run shares this process's loggers: monkeypatch puts the logger back.
    monkeypatch.setattr(logging.getLogger("upstash_workflow.asyncio.serve.serve"), "disabled", True)
    qstash.mount("https://shop.test", app)
    qstash.trigger("https://shop.test/charge", {"order": 7})
    qstash.drain()
    assert qstash.runs[0].state == "RUN_SUCCESS"
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "workflow run wfr_* failed at step 2, the one after 'reserve' (Run): "
            "500 RuntimeError: card declined",
        ]
    )


def test_the_sync_sdks_failing_step_is_named_too() -> None:
    from workflow_apps import Journal, flask_workflow_app

    from pytest_qstash import FakeQStash
    from pytest_qstash.testing.report import section
    from pytest_qstash.testing.step_failures import StepFailureLog

    steps = StepFailureLog()
    with FakeQStash(seed=1) as qstash, steps.listening():
        qstash.mount("https://flask.test", flask_workflow_app(Journal()))
        run_id = qstash.trigger("https://flask.test/fails", {})
        qstash.drain()
    assert qstash.runs[0].state == "RUN_FAILED"
    text = section(qstash.store, len(qstash.deliveries), steps.by_run)
    assert text is not None
    assert text.splitlines()[0] == (
        f"workflow run {run_id} at https://flask.test/fails failed at step 2, 'charge' (Run): "
        "500 RuntimeError: card declined"
    )
    assert "  failure callback: CALLBACK_SUCCESS" in text.splitlines()


def test_a_failed_run_whose_dlq_entry_was_deleted_still_shows_its_failing_step(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        FAILING_WORKFLOW
        + """
import os

from qstash import QStash


def test_checkout(qstash):
    qstash.mount("https://shop.test", app)
    qstash.trigger("https://shop.test/charge", {"order": 7})
    qstash.drain()
    client = QStash(os.environ["QSTASH_TOKEN"])
    client.dlq.delete(client.dlq.list().messages[0].dlq_id)
    assert qstash.runs[0].state == "RUN_SUCCESS"
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "workflow run wfr_* at https://shop.test/charge failed at step 2, 'pay' (Run): "
            "500 RuntimeError: card declined",
            "  3 attempt(s) of msg_* (retried=2/2), its DLQ entry * since deleted:",
        ]
    )


# -- whose refusal a hint speaks of; which run a publish began ---------------------------------
def _openai_workflow() -> Any:
    """A workflow whose ``context.call`` reaches a third party (an OpenAI-like API that
    refuses the key with 401), and that third party."""
    from fastapi import FastAPI
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from upstash_workflow import AsyncWorkflowContext
    from upstash_workflow.fastapi import Serve

    app = FastAPI()

    @Serve(app).post("/summarize")
    async def summarize(context: AsyncWorkflowContext[Any]) -> None:
        reply = await context.call(
            "ask", url="https://api.openai.test/v1/chat/completions", method="POST", body={}
        )

        async def keep() -> int:
            return reply.status

        await context.run("keep", keep)

    @app.post("/private")
    async def private() -> JSONResponse:  # the app's own refusal
        return JSONResponse({"detail": "Not authenticated"}, 401)

    async def refuse(request: Request) -> JSONResponse:
        return JSONResponse({"error": {"message": "Incorrect API key provided"}}, 401)

    openai = Starlette(routes=[Route("/v1/chat/completions", refuse, methods=["POST"])])
    return app, openai


def test_a_third_party_refusing_a_call_gets_its_own_line_and_no_signature_hint() -> None:
    from pytest_qstash import FakeQStash
    from pytest_qstash.testing.report import section

    app, openai = _openai_workflow()
    with FakeQStash(seed=1) as qstash:
        qstash.mount("https://app.test", app)
        qstash.mount("https://api.openai.test", openai)
        run_id = qstash.trigger("https://app.test/summarize", {})
        qstash.drain()
        text = section(qstash.store, len(qstash.deliveries))
    assert qstash.runs[0].state == "RUN_SUCCESS"
    assert [d.status for d in qstash.deliveries if "openai" in d.url] == [401]
    assert text is not None
    assert (
        f"a context.call of workflow run {run_id} was refused by the third party: POST "
        "https://api.openai.test/v1/chat/completions -> 401 "
        """'{"error":{"message":"Incorrect API key provided"}}'"""
    ) in text.splitlines()
    assert "hint:" not in text  # the app's own endpoints refused nothing


def test_the_apps_own_refusal_still_gets_the_hint_beside_a_refused_call() -> None:
    from qstash import QStash

    from pytest_qstash import FakeQStash
    from pytest_qstash.testing.report import section

    app, openai = _openai_workflow()
    with FakeQStash(seed=1) as qstash:
        qstash.mount("https://app.test", app)
        qstash.mount("https://api.openai.test", openai)
        qstash.trigger("https://app.test/summarize", {})
        QStash(os.environ["QSTASH_TOKEN"]).message.publish_json(url="https://app.test/private")
        qstash.drain()
        text = section(qstash.store, len(qstash.deliveries))
    assert text is not None
    assert "refused by the third party" in text
    assert "hint: a delivery was refused (400/401/403)." in text


def test_a_publish_to_a_workflow_route_says_which_run_it_began() -> None:
    from qstash import QStash
    from workflow_apps import Journal, flask_workflow_app

    from pytest_qstash import FakeQStash
    from pytest_qstash.testing.report import section

    with FakeQStash(seed=1) as qstash:
        qstash.mount("https://flask.test", flask_workflow_app(Journal()))
        published = QStash(os.environ["QSTASH_TOKEN"]).message.publish_json(
            url="https://flask.test/order",
            body={"order": 7, "sku": "A-1", "qty": 1, "ship_at": 0},
        )
        qstash.tick()
        text = section(qstash.store, len(qstash.deliveries))
    [run] = qstash.runs
    publish, start = qstash.messages[:2]
    assert publish.message_id == published.message_id
    assert (publish.started_run_id, publish.workflow_run_id) == (run.run_id, None)
    assert (start.workflow_run_id, start.started_run_id) == (run.run_id, None)
    assert text is not None
    assert f"[began workflow run {run.run_id}]" in text
    assert f"[run {run.run_id}: start, begun by {publish.message_id}]" in text
