"""The dashboard of ``pytest-qstash serve``: its sign-in over plain HTTP, and the page itself in
a real headless browser (Debian's chromium, driven by Selenium through the system
chromedriver). The server, an app under uvicorn (``dashboard_app``) and the real SDK are real
processes on loopback.

``PYTEST_QSTASH_SCREENSHOTS=docs/img pytest tests/test_dashboard.py -k screenshots`` saves the
pages the docs show.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from ci_requirements import CHROMIUM as CHROMIUM_REQUIRED
from ci_requirements import missing
from qstash import QStash
from selenium import webdriver

from pytest_qstash.server import AppProcess, ServerProcess
from pytest_qstash.server.dashboard.routes import DASHBOARD_PATH, dashboard_link

HERE = Path(__file__).parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
#: How long the page may take to show a change (it polls every second).
WAIT_S = 15


@pytest.fixture(scope="module")
def app(qstash_server: ServerProcess) -> Iterator[AppProcess]:
    with AppProcess.start("dashboard_app:app", cwd=HERE) as started:
        yield started


@pytest.fixture(autouse=True)
def _fresh(qstash_server: ServerProcess) -> None:
    qstash_server.reset()


@pytest.fixture
def sdk(qstash_server: ServerProcess) -> QStash:
    return QStash(qstash_server.token, base_url=qstash_server.url, retry=False)


def test_no_token_no_page(qstash_server: ServerProcess) -> None:
    page = f"{qstash_server.url}{DASHBOARD_PATH}"
    refused = requests.get(page, timeout=10)
    assert refused.status_code == 401
    assert refused.text.startswith("Not signed in: open the dashboard link")
    assert requests.get(f"{page}/data", timeout=10).status_code == 401
    assert requests.get(f"{page}/static/dashboard.js", timeout=10).status_code == 401
    wrong = requests.get(f"{page}?qstash_token=nope", timeout=10, allow_redirects=False)
    assert wrong.status_code == 401
    assert "set-cookie" not in wrong.headers

    session = requests.Session()
    link = dashboard_link(qstash_server.url, qstash_server.token)
    signed_in = session.get(link, timeout=10, allow_redirects=False)
    assert signed_in.status_code == 303
    assert signed_in.headers["location"] == DASHBOARD_PATH  # the token leaves the address
    port = qstash_server.url.rsplit(":", 1)[1]
    assert signed_in.headers["set-cookie"].startswith(f"qstash_dashboard_{port}=")
    assert "HttpOnly" in signed_in.headers["set-cookie"]
    assert "SameSite=Strict" in signed_in.headers["set-cookie"]
    html = session.get(page, timeout=10)
    assert html.status_code == 200
    assert "dashboard.js" in html.text
    assert "script-src 'self'" in html.headers["content-security-policy"]
    snapshot = session.get(f"{page}/data", timeout=10).json()
    assert snapshot["state"]["clock"] == "virtual"
    assert set(snapshot["counts"]) >= {"messages", "dlq", "runs", "schedules", "flow_keys"}
    # An action needs the page's header, which a form posted from another site cannot send.
    forged = session.post(f"{page}/act/tick", data="{}", timeout=10)
    assert forged.status_code == 403
    tick = session.post(f"{page}/act/tick", data="{}", headers={"X-QStash-Dashboard": "1"})
    assert tick.status_code == 200
    assert tick.json()["deliveries"] == []
    unknown = session.post(f"{page}/act/rewind", data="{}", headers={"X-QStash-Dashboard": "1"})
    assert unknown.status_code == 404
    assert "tick" in unknown.json()["error"]
    nameless = session.post(f"{page}/act/retry_dlq", data="{}", headers={"X-QStash-Dashboard": "1"})
    assert nameless.status_code == 400
    assert "dlq_id" in nameless.json()["error"]


def test_on_a_real_clock() -> None:
    with ServerProcess.start(clock="real", args=["--credentials-from-env"]) as server:
        link = dashboard_link(server.url, server.token)
        # Printed at start-up, on stderr, just after the four lines of stdout.
        deadline = time.monotonic() + WAIT_S
        while f"dashboard at {link}" not in server.output:
            assert time.monotonic() < deadline, f"no dashboard link in: {server.output!r}"
            time.sleep(0.02)
        session = requests.Session()
        session.get(link, timeout=10).raise_for_status()
        headers = {"X-QStash-Dashboard": "1"}
        assert session.get(f"{server.url}{DASHBOARD_PATH}/data").json()["state"]["clock"] == "real"
        assert session.post(f"{server.url}{DASHBOARD_PATH}/act/tick", headers=headers).ok
        advance = session.post(
            f"{server.url}{DASHBOARD_PATH}/act/advance", data='{"by": "1m"}', headers=headers
        )
        assert advance.status_code == 409
        assert "--clock virtual" in advance.json()["error"]


# -- in a browser ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        absent = [
            name
            for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER))
            if found is None
        ]
        missing(CHROMIUM_REQUIRED, f"not on PATH: {', '.join(absent)}")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # CI containers run as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1200,800",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, what: str, condition: Callable[[Any], Any]) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The page re-renders when the data changes: an element found a moment ago may be gone.
    wait = WebDriverWait(
        driver, WAIT_S, poll_frequency=0.1, ignored_exceptions=[StaleElementReferenceException]
    )
    try:
        return wait.until(condition)
    except Exception as exc:
        shown = driver.find_element("id", "panel").text
        raise AssertionError(
            f"the page did not show {what} within {WAIT_S} s; it shows:\n{shown}"
        ) from exc


def css(driver: Any, selector: str) -> list[Any]:
    return list(driver.find_elements("css selector", selector))


def texts(driver: Any, selector: str) -> list[str]:
    """The text of each element ``selector`` matches now."""
    found: list[str] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)", selector
    )
    return found


def text(driver: Any, selector: str) -> str:
    return "\n".join(texts(driver, selector))


def open_tab(driver: Any, name: str) -> None:
    # Found and clicked in one go: the tabs are redrawn when their counts change.
    script = "const b = document.querySelector(arguments[0]); if (b) b.click(); return !!b;"
    selector = f'nav button[data-tab="{name}"]'
    wait_for(driver, f"the {name} tab", lambda d: d.execute_script(script, selector))


def test_the_dashboard_in_a_browser(
    browser: Any, qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    browser.get(dashboard_link(qstash_server.url, qstash_server.token))
    assert browser.current_url.endswith(DASHBOARD_PATH)  # signed in, the token out of sight
    wait_for(browser, "the clock", lambda d: d.find_element("id", "now").text.endswith("Z"))

    # A published message, delayed, and one whose attempt fails.
    later = sdk.message.publish_json(url=f"{app.url}/jobs/ok", body={"n": 1}, delay="10m")
    failing = sdk.message.publish_json(url=f"{app.url}/jobs/fail", body={}, retries=0)
    later_id = later.message_id  # type: ignore[union-attr]
    failing_id = failing.message_id  # type: ignore[union-attr]
    qstash_server.tick()
    row = f'tr[data-message-id="{later_id}"]'
    wait_for(browser, "the published message", lambda d: "CREATED" in text(d, row))
    failed_row = f'tr[data-message-id="{failing_id}"]'
    wait_for(browser, "the failed message", lambda d: "FAILED" in text(d, failed_row))
    css(browser, failed_row)[0].click()
    wait_for(browser, "the failed attempt", lambda d: text(d, ".attempt.bad"))
    attempt = text(browser, ".attempt.bad")
    assert "500" in attempt
    assert "card declined" in attempt  # the app's answer
    browser.back()  # the message had an address of its own: back to the list
    wait_for(browser, "the list again", lambda d: css(d, row))

    # Advancing the clock from the page delivers the delayed message.
    field = browser.find_element("id", "advance-by")
    field.clear()
    field.send_keys("10m")
    browser.find_element("id", "advance").click()
    wait_for(browser, "the delivery", lambda d: "DELIVERED" in text(d, row))
    delivered = qstash_server.messages.one(message_id=later_id)
    assert delivered.state == "DELIVERED"
    assert delivered.deliveries[0].status == 200

    # The DLQ, and its retry button.
    open_tab(browser, "dlq")
    retry = wait_for(browser, "the DLQ entry", lambda d: css(d, 'button[data-action="retry_dlq"]'))
    retry[0].click()
    wait_for(browser, "the retry", lambda d: len(qstash_server.messages) == 3)
    assert qstash_server.dlq == []
    assert qstash_server.messages[-1].url == f"{app.url}/jobs/fail"

    # A workflow run's steps on its timeline.
    run_id = qstash_server.trigger(f"{app.url}/workflow/order", {"order": 7, "qty": 2})
    failing_id = qstash_server.trigger(f"{app.url}/workflow/declined", {}, retries=0)
    qstash_server.drain()
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"
    assert qstash_server.runs.one(run_id=failing_id).state == "RUN_FAILED"
    open_tab(browser, "runs")
    card = f'.card[data-run-id="{run_id}"]'
    wait_for(browser, "the run", lambda d: "RUN_SUCCESS" in text(d, card))
    steps = [" ".join(step.split()) for step in texts(browser, f"{card} .step")]
    assert len(steps) == 4, steps
    assert steps[0].startswith("+0s #1 validate Run")
    assert steps[1].startswith("+0s #2 cool-down SleepFor")
    assert steps[2].startswith("+30s #3 reserve Call")  # after the sleep
    assert steps[3].startswith("+30s #4 confirm Run")
    # A failed run shows the step it failed at first, with the app's answer.
    failed_card = f'.card[data-run-id="{failing_id}"]'
    failing = text(browser, f"{failed_card} .failing")
    assert "failed at step 2, the one after 'validate' (Run)" in failing
    assert "card declined by the bank" in failing
    assert texts(browser, f"{failed_card} > div")[2] == failing  # before the timeline
    failed_steps = texts(browser, f"{failed_card} .step")
    assert "validate" in failed_steps[0]
    assert "step 2" in failed_steps[1]  # where it stopped, on the timeline too


def test_parallel_steps_share_a_bracket(
    browser: Any, qstash_server: ServerProcess, app: AppProcess
) -> None:
    # The TypeScript SDK's parallel steps, published as it publishes them (the Python SDK has
    # none): two plan steps (stepId 0, targetStep k, concurrent 2), then their two results.
    run_id = qstash_server.trigger(f"{app.url}/jobs/ok", {}, run_id="wfr_parallel")
    headers = {
        "Authorization": f"Bearer {qstash_server.token}",
        "Content-Type": "application/json",
        "Upstash-Workflow-RunId": run_id,
        "Upstash-Workflow-Url": f"{app.url}/jobs/ok",
        "Upstash-Delay": "1h",  # never delivered in this test
    }

    def step(step_id: int, name: str, target: int | None, out: str | None) -> None:
        body = {"stepId": step_id, "stepName": name, "stepType": "Run", "concurrent": 2}
        body |= {"targetStep": target, "out": out}
        answer = requests.post(
            f"{qstash_server.url}/v2/publish/{app.url}/jobs/ok",
            json=body,
            headers=headers,
            timeout=10,
        )
        assert answer.status_code == 200, answer.text

    step(0, "fetch-a", 1, None)
    step(0, "fetch-b", 2, None)
    step(1, "fetch-a", None, '"a"')
    step(2, "fetch-b", None, '"b"')
    # The run's steps are the results (plan steps stand for results not yet in).
    assert [s.concurrent for s in qstash_server.runs.one(run_id=run_id).steps] == [2, 2]

    browser.get(dashboard_link(qstash_server.url, qstash_server.token))
    open_tab(browser, "runs")
    groups = f'.card[data-run-id="{run_id}"] .group'
    wait_for(browser, "the parallel group", lambda d: len(texts(d, groups)) == 1)
    [results] = (" ".join(g.split()) for g in texts(browser, groups))
    assert results.startswith("parallel \u00d72")
    assert "#1 fetch-a" in results
    assert "#2 fetch-b" in results


def test_schedules_queues_and_flow_keys(
    browser: Any, qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    schedule_id = sdk.schedule.create(destination=f"{app.url}/jobs/ok", cron="0 8 * * *")
    sdk.queue.upsert("emails", parallelism=3)
    sdk.queue.pause("emails")
    sdk.message.publish_json(
        url=f"{app.url}/jobs/ok",
        body={},
        delay="1h",
        flow_control={"key": "tenant-7", "rate": 10, "period": "1m"},
    )
    browser.get(dashboard_link(qstash_server.url, qstash_server.token))

    open_tab(browser, "schedules")
    wait_for(browser, "the schedule", lambda d: schedule_id in text(d, "#panel"))
    assert "0 8 * * *" in text(browser, "#panel")
    open_tab(browser, "queues")
    wait_for(browser, "the queue", lambda d: "emails" in text(d, "#panel"))
    assert " ".join(text(browser, "#panel tbody").split()).startswith("emails 3 0 paused")
    open_tab(browser, "flow_keys")
    wait_for(browser, "the key", lambda d: "tenant-7" in text(d, "#panel"))
    assert "10 per 60s" in text(browser, "#panel")


def click(driver: Any, what: str, selector: str) -> None:
    """Find and click in one go: the page re-renders when the data changes."""
    script = "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;"
    wait_for(driver, what, lambda d: d.execute_script(script, selector))


def _route(driver: Any) -> str:
    found: str = driver.execute_script("return location.hash")
    return found


def test_find_link_and_reload_in_a_browser(
    browser: Any, qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    from selenium.webdriver.support.ui import Select

    for n in range(3):
        sdk.message.publish_json(url=f"{app.url}/jobs/ok", body={"n": n}, delay="1h")
    labelled = sdk.message.publish_json(
        url=f"{app.url}/jobs/ok", body={"order": 7}, delay="1h", label="billing"
    ).message_id  # type: ignore[union-attr]
    failing = sdk.message.publish_json(url=f"{app.url}/jobs/fail", body={}, retries=0)
    failing_id = failing.message_id  # type: ignore[union-attr]
    qstash_server.tick()
    qstash_server.advance("1m")
    browser.get(dashboard_link(qstash_server.url, qstash_server.token))

    # The failing message's row says what went wrong, unopened; labels show.
    failed_row = f'tr[data-message-id="{failing_id}"]'
    wait_for(browser, "the failed row", lambda d: "500" in text(d, f"{failed_row} .outcome"))
    assert "card declined" in text(browser, f"{failed_row} .outcome")
    assert text(browser, f'tr[data-message-id="{labelled}"] .tag') == "billing"
    assert "1/1" in text(browser, f"{failed_row} .attempts")
    assert "waiting" in text(browser, f'tr[data-message-id="{labelled}"] .outcome')
    assert text(browser, f"{failed_row} time") == "1m ago"  # relative, the exact time on hover
    exact = browser.find_element("css selector", f"{failed_row} time").get_attribute("title")
    assert exact.endswith(" UTC")

    # Search narrows the list to one message; the state filter to the failed one.
    search = browser.find_element("id", "search")
    search.send_keys("billing")
    wait_for(browser, "one row", lambda d: len(css(d, "tr.item")) == 1)
    assert css(browser, "tr.item")[0].get_attribute("data-message-id") == labelled
    assert "q=billing" in _route(browser)
    search.clear()
    search.send_keys("nothing like it")
    wait_for(browser, "no row", lambda d: "matches" in text(d, "#panel"))
    search.clear()
    search.send_keys(" ")  # an input event: the box is empty again
    wait_for(browser, "every row", lambda d: len(css(d, "tr.item")) == 5)
    Select(browser.find_element("id", "state-filter")).select_by_value("FAILED")
    wait_for(browser, "the failed one", lambda d: len(css(d, "tr.item")) == 1)
    assert css(browser, "tr.item")[0].get_attribute("data-message-id") == failing_id
    # The filter is in the address: a reload keeps it.
    browser.refresh()
    wait_for(browser, "the filter again", lambda d: len(css(d, "tr.item")) == 1)
    assert browser.find_element("id", "state-filter").get_attribute("value") == "FAILED"

    # A message's link opens it, also after a reload.
    click(browser, "the failed row", f"{failed_row} td.outcome")
    wait_for(browser, "the opened message", lambda d: text(d, ".detail .attempt.bad"))
    assert _route(browser) == f"#messages/{failing_id}"
    browser.refresh()
    wait_for(browser, "the message after a reload", lambda d: text(d, ".detail .attempt.bad"))
    assert "attempt 1 of 1" in text(browser, ".detail .attempt.bad")
    assert "card declined" in text(browser, ".detail .attempt.bad")

    # From the message to its DLQ entry, which shows the failing answer, and its retry.
    click(browser, "the DLQ link", '.detail a[data-link="dlq"]')
    wait_for(browser, "the DLQ entry", lambda d: "The failing answer" in text(d, ".detail"))
    assert "card declined" in text(browser, ".detail")
    assert _route(browser).startswith("#dlq/")
    click(browser, "the retry button", '.detail button[data-action="retry_dlq"]')
    wait_for(browser, "the retry", lambda d: "new message" in text(d, "#status"))
    copy_id = text(browser, "#status").rsplit(" ", 1)[1]
    browser.get(f"{qstash_server.url}{DASHBOARD_PATH}#messages/{copy_id}")
    origin = '.detail dl.links a[data-link="messages"]'
    wait_for(browser, "the origin link", lambda d: text(d, origin) == failing_id)
    click(browser, "the origin link", origin)
    wait_for(browser, "the origin", lambda d: _route(d) == f"#messages/{failing_id}")
    wait_for(browser, "its copy", lambda d: copy_id in text(d, ".detail dl.links"))

    # The log's rows lead to their message.
    open_tab(browser, "events")
    click(browser, "a log row of the copy", f'#panel a[href="#messages/{copy_id}"]')
    wait_for(browser, "the copy", lambda d: _route(d) == f"#messages/{copy_id}")
    # Tabs in the product's words.
    titles = texts(browser, "nav button")
    assert any(t.startswith("Waiting for events") for t in titles)
    assert any(t.startswith("Workflow DLQ") for t in titles)
    assert not any("waiters" in t or "workflow_dlq" in t for t in titles)


def test_a_run_links_its_messages_and_its_dlq_entry(
    browser: Any, qstash_server: ServerProcess, app: AppProcess
) -> None:
    run_id = qstash_server.trigger(f"{app.url}/workflow/declined", {}, retries=0)
    qstash_server.drain()
    browser.get(f"{dashboard_link(qstash_server.url, qstash_server.token)}")
    browser.get(f"{qstash_server.url}{DASHBOARD_PATH}#runs/{run_id}")
    wait_for(browser, "the run", lambda d: "RUN_FAILED" in text(d, ".detail"))
    failing = text(browser, ".detail .failing")
    assert "failed at step 2" in failing
    assert "card declined by the bank" in failing
    click(browser, "the failing step's message", '.detail .failing a[data-link="messages"]')
    wait_for(browser, "the failing step's message", lambda d: _route(d).startswith("#messages/"))
    wait_for(browser, "the run link", lambda d: text(d, '.detail a[data-link="runs"]') == run_id)


def test_what_a_page_shows_is_text_not_markup(
    browser: Any, qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    payload = '<img src=x id=pwned onerror="document.title=1">"><script>document.title=2</script>'
    hostile = sdk.message.publish(
        url=f"{app.url}/jobs/ok", body=payload, delay="1h", headers={"X-Note": payload}
    ).message_id  # type: ignore[union-attr]
    browser.get(dashboard_link(qstash_server.url, qstash_server.token))
    browser.get(f"{qstash_server.url}{DASHBOARD_PATH}#messages/{hostile}")
    wait_for(browser, "the body, as text", lambda d: payload in text(d, ".detail"))
    assert css(browser, "#pwned") == []
    assert css(browser, ".detail script") == []
    assert browser.title == "pytest-qstash"
    browser.get(f"{qstash_server.url}{DASHBOARD_PATH}#messages")
    search = wait_for(browser, "the search box", lambda d: d.find_element("id", "search"))
    search.send_keys("<img src=x id=pwned2>")
    wait_for(browser, "the search", lambda d: "matches" in text(d, "#panel"))
    assert css(browser, "#pwned2") == []


def test_screenshots(
    browser: Any, qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    """The page at a desktop's size and a phone's, saved under ``$PYTEST_QSTASH_SCREENSHOTS``
    (the docs' images: ``docs/img``) when that is set."""
    sdk.message.publish_json(url=f"{app.url}/jobs/ok", body={"n": 1}, delay="10m", label="billing")
    sdk.message.publish_json(
        url=f"{app.url}/jobs/fail", body={"order": 7}, retries=1, label="checkout"
    )
    sdk.message.publish_json(url=f"{app.url}/jobs/ok", body={"n": 2})
    sdk.message.publish_json(url=f"{app.url}/jobs/fail", body={}, retries=0)
    qstash_server.trigger(f"{app.url}/workflow/order", {"order": 7, "qty": 2})
    qstash_server.trigger(f"{app.url}/workflow/declined", {}, retries=0)
    qstash_server.advance("1m")
    folder = os.environ.get("PYTEST_QSTASH_SCREENSHOTS")
    shots = [
        ((1400, 1000), "messages", "dashboard-messages.png"),
        ((1400, 1000), "runs", "dashboard-runs.png"),
        ((1400, 1000), "dlq", "dashboard-dlq.png"),
        ((390, 844), "messages", "dashboard-phone.png"),
    ]
    browser.get(dashboard_link(qstash_server.url, qstash_server.token))
    try:
        for (width, height), tab, name in shots:
            browser.set_window_size(width, height)
            browser.get(f"{qstash_server.url}{DASHBOARD_PATH}#{tab}")
            wait_for(browser, f"the {tab}", lambda d: css(d, "#panel table, #panel .card"))
            # Nothing wider than the window: no sideways scrolling, on a phone either.
            overflow = browser.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 0, (tab, width, overflow)
            if folder:
                browser.save_screenshot(str(Path(folder) / name))
    finally:
        browser.set_window_size(1200, 800)


def test_polls_follow_one_another(browser: Any, qstash_server: ServerProcess) -> None:
    browser.get(dashboard_link(qstash_server.url, qstash_server.token))
    wait_for(browser, "the clock", lambda d: d.find_element("id", "now").text.endswith("Z"))
    browser.execute_script("performance.clearResourceTimings()")
    read_polls = (
        "return performance.getEntriesByType('resource')"
        ".filter((e) => e.name.includes('/dashboard/data'))"
        ".map((e) => [e.startTime, e.responseEnd])"
    )
    # The page keeps polling on its own: wait for three polls, however long they take.
    polls = wait_for(
        browser, "three polls", lambda d: (p := d.execute_script(read_polls))[2:] and p
    )
    for (_, ended), (started, _) in itertools.pairwise(polls):
        assert started >= ended, polls  # never two at once
