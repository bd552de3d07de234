// The workflow app the Python suite runs against `pytest-qstash serve`: each workflow of
// WORKFLOWS served under /workflows/<name> by the SDK's serveMany (its Web-standard adapter,
// Request -> Response, behind node:http), what the workflows saw kept for the tests to read
// (GET /_records, DELETE /_records), and the clients callable over HTTP (POST /_client).
import { createWorkflow, serveMany } from "@upstash/workflow/cloudflare";
import { WorkflowNonRetryableError } from "@upstash/workflow";
import { clients, runCall } from "./client-calls.mjs";
import { json, listen } from "./http.mjs";

const records = [];
const record = (workflow, what, value) => records.push({ workflow, what, value });

const invoked = createWorkflow(async (context) => {
  const payload = context.requestPayload;
  const seen = await context.run("read payload", () => ({
    payload,
    header: context.headers.get("x-invoke-header"),
  }));
  if (payload?.sleep) await context.sleep("hold", payload.sleep);
  if (payload?.fail) {
    await context.run("fail", () => {
      throw new WorkflowNonRetryableError("invoked run failed on purpose");
    });
  }
  return { echoed: seen.payload, header: seen.header };
});

// Whether checkout's "charge" step fails (POST /_checkout {"broken": false} mends it), and
// whether the alert route (a failure URL) answers 500.
const checkout = { broken: true };
const checkoutSteps = async (context) => {
  await context.run("reserve", () => {
    record("checkout", "ran", "reserve");
    return "reserved";
  });
  await context.run("charge", () => {
    record("checkout", "ran", "charge");
    if (checkout.broken) throw new Error("card declined");
    return "charged";
  });
};

const WORKFLOWS = {
  // reserve -> charge, failing while broken; with and without a failure function.
  checkout: createWorkflow(checkoutSteps, {
    failureFunction: async ({ failResponse }) => record("checkout", "failure", failResponse),
  }),
  plainCheckout: createWorkflow(checkoutSteps),
  // Two steps side by side, then a sleep: what the logs group as parallel, then sequential.
  parallel: createWorkflow(async (context) => {
    const [a, b] = await Promise.all([
      context.run("left", () => "L"),
      context.run("right", () => "R"),
    ]);
    await context.sleep("rest", 5);
    return a + b;
  }),
  // waitForEvent: the event's data, or the timeout.
  wait: createWorkflow(async (context) => {
    const { eventId, timeout } = context.requestPayload;
    const { eventData, timeout: timedOut } = await context.waitForEvent(
      "wait for event",
      eventId,
      { timeout: timeout ?? "7d" },
    );
    await context.run("after wait", () => record("wait", "resumed", { eventData, timedOut }));
    return { eventData, timedOut };
  }),
  // Two waits in parallel: each resumed on its own, the run goes on with both.
  waitBoth: createWorkflow(async (context) => {
    const { first, second } = context.requestPayload;
    const [a, b] = await Promise.all([
      context.waitForEvent("wait first", first, { timeout: "1d" }),
      context.waitForEvent("wait second", second, { timeout: "2d" }),
    ]);
    await context.run("after both", () => record("waitBoth", "resumed", [a, b]));
  }),
  // notify from a step: every waiter of the event.
  notifier: createWorkflow(async (context) => {
    const { eventId, eventData } = context.requestPayload;
    const { notifyResponse } = await context.notify("notify", eventId, eventData);
    await context.run("notified", () => record("notifier", "notified", notifyResponse));
  }),
  // createWebhook + waitForWebhook: the request that reached the webhook URL.
  webhook: createWorkflow(async (context) => {
    const webhook = await context.createWebhook("create webhook");
    await context.run("publish webhook url", () => record("webhook", "url", webhook.webhookUrl));
    const { sleepFirst } = context.requestPayload ?? {};
    if (sleepFirst) await context.sleep("before waiting", sleepFirst);
    const { request, timeout } = await context.waitForWebhook("wait for webhook", webhook, "1h");
    const seen = timeout
      ? { timeout }
      : {
          method: request.method,
          url: request.url,
          header: request.headers.get("x-hook-header"),
          body: await request.text(),
        };
    await context.run("after webhook", () => record("webhook", "request", seen));
  }),
  invoked,
  // invoke: the invoked run's result, failure or cancellation.
  invoker: createWorkflow(async (context) => {
    const result = await context.invoke("invoke child", {
      workflow: invoked,
      body: context.requestPayload,
      headers: { "x-invoke-header": "from the invoker" },
    });
    await context.run("after invoke", () => record("invoker", "result", result));
  }),
};

const workflows = serveMany(WORKFLOWS);
const all = clients();

listen({
  "/": async () => json({ workflows: Object.keys(WORKFLOWS) }),
  ...Object.fromEntries(
    Object.keys(WORKFLOWS).map((name) => [
      `/workflows/${name}`,
      (request) => workflows.fetch(request, process.env),
    ]),
  ),
  "/_records": async (request) => {
    if (request.method === "DELETE") records.length = 0;
    return json(records);
  },
  "/_checkout": async (request) => {
    checkout.broken = Boolean((await request.json()).broken);
    return json(checkout);
  },
  "/_alert": async (request) => {
    record("alert", "received", JSON.parse(await request.text()));
    return json({}, checkout.broken ? 500 : 200);
  },
  "/_client": async (request) => json(await runCall(all, await request.json())),
});
