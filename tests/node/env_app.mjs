// An app configured by its environment alone, as the SDKs read it: no URL, token or key in
// the code. What the Python suite runs with nothing but QSTASH_DEV=true (dev mode), or with
// QSTASH_REGION and the region's variables (multi-region mode).
//
// POST /publish {body}: publishes body to /hook with the @upstash/qstash Client.
// POST /hook: a delivery, verified by the Receiver (401 when it fails), kept.
// POST /trigger {body}: starts the /workflow run with the @upstash/workflow Client.
// /workflow: a two-step workflow (the SDK verifies each delivery itself).
// GET /received: what /hook and the workflow saw.
import { Client, Receiver } from "@upstash/qstash";
import { Client as WorkflowClient } from "@upstash/workflow";
import { serve } from "@upstash/workflow/cloudflare";
import { json, listen } from "./http.mjs";

const appUrl = process.env.APP_URL;
const received = [];
const qstash = new Client();
const receiver = new Receiver();
const workflows = new WorkflowClient();

const greet = serve(async (context) => {
  const name = await context.run("read name", () => context.requestPayload.name);
  const greeting = await context.run("greet", () => `hello ${name}`);
  await context.run("keep", () => {
    received.push({ workflow: greeting });
  });
  return greeting;
});

listen({
  "/": async () => json({ ok: true }),
  "/publish": async (request) => {
    const { body } = await request.json();
    return json(await qstash.publishJSON({ url: `${appUrl}/hook`, body }));
  },
  "/hook": async (request) => {
    const body = await request.text();
    let verified = false;
    try {
      verified = await receiver.verify({
        signature: request.headers.get("upstash-signature") ?? "",
        body,
        url: `${appUrl}/hook`,
        upstashRegion: request.headers.get("upstash-region") ?? undefined,
      });
    } catch (error) {
      received.push({ refused: String(error?.message ?? error) });
      return json({ error: "bad signature" }, 401);
    }
    received.push({ hook: JSON.parse(body), verified, region: request.headers.get("upstash-region") });
    return json({ ok: true });
  },
  "/trigger": async (request) => {
    const { body } = await request.json();
    return json(await workflows.trigger({ url: `${appUrl}/workflow`, body }));
  },
  "/workflow": (request) => greet.fetch(request, process.env),
  "/received": async () => json(received),
});
