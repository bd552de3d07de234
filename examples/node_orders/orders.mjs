// An order service on Upstash Workflow (TypeScript SDK), on a plain node:http server.
//
//   POST /orders            {"orderId", "amount"}  starts the order's workflow run
//   GET  /orders/<orderId>                          the order as the workflow left it
//   POST /payments          {"orderId", "amount"}  the payment provider's call: notifies the run
//   POST /workflows/order                           the workflow route, called by QStash (signed)
//
// The workflow reserves stock, then waits for the order's payment event for at most 7 days:
// paid, it ships the order; not paid in time, it cancels it. QSTASH_URL, QSTASH_TOKEN and the
// signing keys come from the environment, as in production; APP_URL is this service's own URL.
import http from "node:http";
import { Client, serve } from "@upstash/workflow";

const orders = new Map();
const client = new Client({ baseUrl: process.env.QSTASH_URL, token: process.env.QSTASH_TOKEN });
// This service's own URL: APP_URL, else where it listens (known once it does).
let appUrl = process.env.APP_URL;

const paymentEvent = (orderId) => `payment-${orderId}`;

const orderWorkflow = serve(async (context) => {
  const { orderId, amount } = context.requestPayload;
  await context.run("reserve stock", () => {
    orders.set(orderId, { orderId, amount, status: "awaiting payment" });
  });
  const { eventData, timeout } = await context.waitForEvent(
    "wait for payment",
    paymentEvent(orderId),
    { timeout: "7d" },
  );
  if (timeout) {
    await context.run("cancel order", () => {
      orders.set(orderId, { ...orders.get(orderId), status: "cancelled: not paid within 7 days" });
    });
    return { orderId, status: "cancelled" };
  }
  await context.run("ship order", () => {
    orders.set(orderId, { ...orders.get(orderId), status: "shipped", paid: eventData.amount });
  });
  return { orderId, status: "shipped" };
});

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

function reply(res, status, value) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(value));
}

async function route(req, res) {
  const path = (req.url ?? "/").split("?")[0];
  const body = await readBody(req);
  if (req.method === "POST" && path === "/workflows/order") {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) headers.set(name, String(value));
    const request = new Request(`${appUrl}${req.url}`, { method: "POST", headers, body });
    const response = await orderWorkflow.handler(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
    return;
  }
  if (req.method === "POST" && path === "/orders") {
    const order = JSON.parse(body.toString("utf8"));
    const { workflowRunId } = await client.trigger({ url: `${appUrl}/workflows/order`, body: order });
    orders.set(order.orderId, { ...order, status: "placed" });
    return reply(res, 201, { workflowRunId });
  }
  if (req.method === "POST" && path === "/payments") {
    const { orderId, amount } = JSON.parse(body.toString("utf8"));
    const notified = await client.notify({ eventId: paymentEvent(orderId), eventData: { amount } });
    return reply(res, 200, { notified: notified.length });
  }
  const match = path.match(/^\/orders\/([^/]+)$/);
  if (req.method === "GET" && match) {
    const order = orders.get(match[1]);
    return order ? reply(res, 200, order) : reply(res, 404, { error: "no such order" });
  }
  if (req.method === "GET" && path === "/") return reply(res, 200, { service: "orders" });
  return reply(res, 404, { error: `no route ${req.method} ${path}` });
}

const server = http.createServer((req, res) => {
  route(req, res).catch((error) => {
    console.error(error);
    reply(res, 500, { error: String(error) });
  });
});
// Started by a test, the service listens on the socket the test bound (its descriptor is the
// first argument); started by hand, on PORT (0: a free port). It says where on stdout.
const fd = process.argv[2];
const where = fd !== undefined ? { fd: Number(fd) } : { port: Number(process.env.PORT ?? 3000), host: "127.0.0.1" };
server.listen(where, () => {
  appUrl ??= `http://127.0.0.1:${server.address().port}`;
  console.log(`orders: listening on ${appUrl}`);
});
// Stop with the process that started it.
const parent = process.ppid;
setInterval(() => process.ppid !== parent && process.exit(0), 500).unref();
