// Run client calls from the command line: `node client.mjs '<JSON list of calls>'` (or the
// list on stdin) prints one JSON list of results, in order. QSTASH_URL and QSTASH_TOKEN come
// from the environment.
import { clients, runCall } from "./client-calls.mjs";

async function readInput() {
  if (process.argv[2] !== undefined) return process.argv[2];
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

const calls = JSON.parse(await readInput());
const all = clients();
const results = [];
for (const call of calls) results.push(await runCall(all, call));
process.stdout.write(JSON.stringify(results) + "\n");
