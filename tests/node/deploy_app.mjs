// The workflow app the deploy-check tests run (tests/test_node_deploy_check.py): three routes
// on @upstash/workflow's `serve`, whose step names `DEPLOY_RENAME` ("old=new,old2=new2")
// changes, as a new deploy of the app would.
//   /flow   run "a" -> sleep "b" (1h) -> run "c"
//   /par    run "left" and run "right" side by side -> sleep "rest" (1h) -> run "done"
//   /wait   run "a" -> waitForEvent "wait for event" (payload.eventId) -> run "after"
import { serve } from "@upstash/workflow";
import { json, listen } from "./http.mjs";

const renamed = Object.fromEntries(
  (process.env.DEPLOY_RENAME ?? "")
    .split(",")
    .filter(Boolean)
    .map((pair) => pair.split("=")),
);
const step = (name) => renamed[name] ?? name;

const flow = serve(async (context) => {
  await context.run(step("a"), () => "a");
  await context.sleep(step("b"), "1h");
  await context.run(step("c"), () => "c");
});

const par = serve(async (context) => {
  const [left, right] = await Promise.all([
    context.run(step("left"), () => "L"),
    context.run(step("right"), () => "R"),
  ]);
  await context.sleep(step("rest"), "1h");
  await context.run(step("done"), () => left + right);
});

const wait = serve(async (context) => {
  await context.run(step("a"), () => "a");
  const { eventData } = await context.waitForEvent(
    step("wait for event"),
    context.requestPayload.eventId,
    { timeout: "7d" },
  );
  await context.run(step("after"), () => eventData);
});

listen({
  "/": async () => json({ renamed }),
  "/flow": (request) => flow.handler(request),
  "/par": (request) => par.handler(request),
  "/wait": (request) => wait.handler(request),
});
