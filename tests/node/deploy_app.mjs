// The Express app on @upstash/workflow's Express adapter that the deploy-check and load tests
// run (tests/test_node_deploy_check.py, tests/test_node_load.py): three workflows whose code a
// new deploy changes through the environment.
//   /flow   run "a" -> sleep "b" (1h) -> run "c"
//   /par    run "left" and run "right" side by side -> sleep "rest" (1h) -> run "done"
//   /wait   run "a" -> waitForEvent "wait for event" (payload.eventId) -> run "after"
// DEPLOY_RENAME ("old=new,old2=new2") renames steps; DEPLOY_CHANGE changes /flow:
//   append  a run "d" after "c"            body   "a" returns "A" (its name kept)
//   swap    sleep "b" before run "a"       remove no run "a"
// The parent passes the listening socket's descriptor as the first argument.
import express from "express";
import { serve } from "@upstash/workflow/express";

const renamed = Object.fromEntries(
  (process.env.DEPLOY_RENAME ?? "")
    .split(",")
    .filter(Boolean)
    .map((pair) => pair.split("=")),
);
const change = process.env.DEPLOY_CHANGE ?? "";
const step = (name) => renamed[name] ?? name;

const app = express();
app.use(express.json());
app.use(express.text({ type: "text/*" }));

app.get("/", (request, response) => response.json({ renamed, change }));

app.use(
  "/flow",
  serve(async (context) => {
    const a = () => context.run(step("a"), () => (change === "body" ? "A" : "a"));
    const b = () => context.sleep(step("b"), "1h");
    if (change === "swap") {
      await b();
      await a();
    } else {
      if (change !== "remove") await a();
      await b();
    }
    await context.run(step("c"), () => "c");
    if (change === "append") await context.run(step("d"), () => "d");
  }),
);

app.use(
  "/par",
  serve(async (context) => {
    const [left, right] = await Promise.all([
      context.run(step("left"), () => "L"),
      context.run(step("right"), () => "R"),
    ]);
    await context.sleep(step("rest"), "1h");
    await context.run(step("done"), () => left + right);
  }),
);

app.use(
  "/wait",
  serve(async (context) => {
    await context.run(step("a"), () => "a");
    const { eventData } = await context.waitForEvent(
      step("wait for event"),
      context.requestPayload.eventId,
      { timeout: "7d" },
    );
    await context.run(step("after"), () => eventData);
  }),
);

app.listen({ fd: Number(process.argv[2]) });

// Never outlive the test process, however it ends.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.exit(0);
}, 500).unref();
