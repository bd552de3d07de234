// Workflows that reach the outside world, run against `pytest-qstash serve` with outbound
// mounts (tests/test_node_outbound.py): context.api.openai and context.call, whose requests
// QStash makes, go through the server's mounts to fake-openai.mjs and to the partner API
// faked here (/fake-partner); and the steps the other Node tests do not cover: sleepUntil, cancel, and
// WorkflowRetryAfterError. Same routes as app.mjs for the harness: /_records, /_client.
import { createWorkflow, serveMany } from "@upstash/workflow/cloudflare";
import { WorkflowRetryAfterError } from "@upstash/workflow";
import { clients, runCall } from "./client-calls.mjs";
import { json, listen } from "./http.mjs";

const records = [];
const record = (workflow, what, value) => records.push({ workflow, what, value });

// What reached the partner: the tests check the mounts kept method, headers and body.
const seen = async (name, request) => {
  const url = new URL(request.url);
  const body = await request.text();
  record(name, "request", {
    method: request.method,
    path: url.pathname + url.search,
    host: request.headers.get("host"),
    partnerKey: request.headers.get("x-partner-key"),
    body: body ? JSON.parse(body) : null,
  });
  return body ? JSON.parse(body) : null;
};

// How many times the flaky step has run, by run id.
const flakyRuns = new Map();

const WORKFLOWS = {
  // An agent: ask OpenAI, then hand the answer to a partner API; both calls made by QStash.
  agent: createWorkflow(async (context) => {
    const { question } = context.requestPayload;
    const answer = await context.api.openai.call("ask openai", {
      token: "sk-test",
      operation: "chat.completions.create",
      body: { model: "gpt-4o-mini", messages: [{ role: "user", content: question }] },
    });
    const reply = answer.body.choices[0].message.content;
    const quote = await context.call("partner quote", {
      url: "https://api.partner.test/v1/quotes?sku=42",
      method: "POST",
      headers: { "x-partner-key": "pk-test" },
      body: JSON.stringify({ reply }),
    });
    await context.run("done", () =>
      record("agent", "result", {
        openai: { status: answer.status, reply },
        partner: { status: quote.status, body: quote.body },
      }),
    );
  }),
  // sleepUntil a moment (ISO 8601 in the payload).
  sleepUntil: createWorkflow(async (context) => {
    await context.sleepUntil("wait for launch", new Date(context.requestPayload.until));
    await context.run("launch", () => record("sleepUntil", "woke", true));
  }),
  // cancel() from inside: the steps after it never run.
  selfCancel: createWorkflow(async (context) => {
    await context.run("before", () => record("selfCancel", "ran", "before"));
    await context.cancel();
    await context.run("after", () => record("selfCancel", "ran", "after"));
  }),
  // A step that asks to be retried after 30 seconds the first time it runs.
  retryAfter: createWorkflow(async (context) => {
    const result = await context.run("flaky", () => {
      const runs = (flakyRuns.get(context.workflowRunId) ?? 0) + 1;
      flakyRuns.set(context.workflowRunId, runs);
      record("retryAfter", "ran", runs);
      if (runs === 1) throw new WorkflowRetryAfterError("rate limited, come back later", 30);
      return `ok after ${runs}`;
    });
    await context.run("after", () => record("retryAfter", "result", result));
  }),
};

const workflows = serveMany(WORKFLOWS);
const all = clients();

listen({
  ...Object.fromEntries(
    Object.keys(WORKFLOWS).map((name) => [
      `/workflows/${name}`,
      (request) => workflows.fetch(request, process.env),
    ]),
  ),
  "/fake-partner/v1/quotes": async (request) => {
    const body = await seen("partner", request);
    return json({ quote: 99, for: body.reply }, 201);
  },
  "/_records": async (request) => {
    if (request.method === "DELETE") records.length = 0;
    return json(records);
  },
  "/_client": async (request) => json(await runCall(all, await request.json())),
});
