// The order service tested from Node with node:test, against `pytest-qstash serve` on a virtual
// clock: the test starts the server and the service, moves QStash's time and reads its records
// through the control API. A week-long wait for a payment takes milliseconds.
//
//   npm test          (pytest-qstash must be on PATH: `pip install "pytest-qstash[server]"`)
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import readline from "node:readline";
import { after, before, beforeEach, test } from "node:test";

/** Starts a process and resolves with it once a line of its stdout matches `ready`. */
function start(command, args, env, ready) {
  const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "inherit"] });
  const lines = readline.createInterface({ input: child.stdout });
  const seen = [];
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`${command} exited (${code}): ${seen.join("\n")}`)));
    lines.on("line", (line) => {
      seen.push(line);
      if (ready(seen)) resolve({ child, seen });
    });
  });
}

let qstash; // the server's QSTASH_URL, QSTASH_TOKEN and signing keys
let server;
let app;
let appUrl;

/** A control API call: GET a list, or POST a verb. */
async function control(method, verb, body) {
  const answer = await fetch(`${qstash.QSTASH_URL}/_qstash/${verb}`, {
    method,
    headers: { Authorization: `Bearer ${qstash.QSTASH_TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const value = await answer.json();
  if (!answer.ok) throw new Error(`${method} /_qstash/${verb}: ${answer.status} ${JSON.stringify(value)}`);
  return value;
}

before(async () => {
  const command = process.env.PYTEST_QSTASH ?? "pytest-qstash";
  const args = ["serve", "--port", "0", "--clock", "virtual", "--stop-with-parent"];
  const names = ["QSTASH_URL", "QSTASH_TOKEN", "QSTASH_CURRENT_SIGNING_KEY", "QSTASH_NEXT_SIGNING_KEY"];
  const variables = (lines) =>
    Object.fromEntries(lines.map((line) => line.split(/=(.*)/s).slice(0, 2)).filter(([name]) => names.includes(name)));
  server = await start(command, args, process.env, (lines) => Object.keys(variables(lines)).length === names.length);
  qstash = variables(server.seen);
  app = await start(process.execPath, ["orders.mjs"], { ...process.env, ...qstash, PORT: "0" }, (lines) =>
    lines.some((line) => line.startsWith("orders: listening on ")),
  );
  appUrl = app.seen.find((line) => line.startsWith("orders: listening on ")).slice("orders: listening on ".length);
});

after(() => {
  app?.child.kill();
  server?.child.kill();
});

// One server for the file: forget what the last test left.
beforeEach(() => control("POST", "reset", {}));

async function placeOrder(orderId, amount) {
  const answer = await fetch(`${appUrl}/orders`, { method: "POST", body: JSON.stringify({ orderId, amount }) });
  assert.equal(answer.status, 201);
  return (await answer.json()).workflowRunId;
}

const order = async (orderId) => (await fetch(`${appUrl}/orders/${orderId}`)).json();

test("a paid order ships", async () => {
  const runId = await placeOrder("o-1", 42);
  await control("POST", "drain"); // runs the workflow up to its wait

  assert.equal((await order("o-1")).status, "awaiting payment");
  const [waiter] = await control("GET", "waiters");
  assert.equal(waiter.event_id, "payment-o-1");

  await control("POST", "notify", { event_id: "payment-o-1", data: { amount: 42 } });
  await control("POST", "drain");

  assert.equal((await order("o-1")).status, "shipped");
  const runs = await control("GET", "runs");
  assert.equal(runs.find((run) => run.run_id === runId).state, "RUN_SUCCESS");
});

test("an unpaid order is cancelled after seven days", async () => {
  await placeOrder("o-2", 10);
  await control("POST", "drain");

  const early = await control("POST", "advance", { by: "6d23h" });
  assert.deepEqual(early.deliveries, []); // still within the week
  await control("POST", "advance", { by: "1h" });

  assert.equal((await order("o-2")).status, "cancelled: not paid within 7 days");
});
