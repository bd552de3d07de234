"""The "qstash" section a failing test's report gets: what was published, tried, refused."""

from __future__ import annotations

import pytest


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
