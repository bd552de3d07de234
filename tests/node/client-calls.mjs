// Calls on the official clients, named in JSON: {"client": "workflow" | "qstash",
// "method": "notify" | "dlq.list" | ..., "args": [...]}. Shared by the app's /_client route
// (cheap: no process per call) and client.mjs (a script, one process per run).
import { Client as QStashClient } from "@upstash/qstash";
import { Client as WorkflowClient } from "@upstash/workflow";

export function clients(env = process.env) {
  const config = { baseUrl: env.QSTASH_URL, token: env.QSTASH_TOKEN, retry: false };
  return { workflow: new WorkflowClient(config), qstash: new QStashClient(config) };
}

/** Run one call; answers {ok: true, value} or {ok: false, error, status}. */
export async function runCall(all, { client = "workflow", method, args = [] }) {
  const path = method.split(".");
  let target = all[client];
  for (const name of path.slice(0, -1)) target = target[name];
  const fn = target?.[path.at(-1)];
  if (typeof fn !== "function") return { ok: false, error: `no method ${client}.${method}` };
  try {
    const value = await fn.apply(target, args);
    return { ok: true, value: value === undefined ? null : value };
  } catch (error) {
    return { ok: false, error: String(error?.message ?? error), status: error?.status ?? null };
  }
}
