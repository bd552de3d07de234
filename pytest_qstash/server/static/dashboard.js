// pytest-qstash's dashboard: polls the server's snapshot and renders it; the buttons post
// actions. Plain DOM, no libraries, nothing fetched from anywhere but this server.
"use strict";

const BASE = "/_qstash/dashboard";
const POLL_MS = 1000;
const KNOWN = ["messages", "dlq", "runs", "schedules", "queues", "flow_keys", "url_groups", "events"];
const TITLES = {
  messages: "Messages", dlq: "DLQ", runs: "Workflow runs", schedules: "Schedules",
  queues: "Queues", flow_keys: "Flow control", url_groups: "URL groups", events: "Log",
};
const HIDDEN = new Set(["deliveries"]); // shown inside their messages
const SLEEPS = new Set(["SleepFor", "SleepUntil", "Wait"]);

let data = null;
let lastText = "";
let tab = location.hash.slice(1) || "messages";
const open = new Set(); // the rows whose details are unfolded, by key

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}
function time(iso) {
  return iso ? `<span class="when">${esc(iso.replace("T", " ").replace(/\.\d+/, "").replace("Z", ""))}</span>` : "—";
}
function ms(iso) { return iso ? Date.parse(iso) : null; }
function duration(msValue) {
  // "1h30m", "2d4h", "45s": the two largest units.
  let s = Math.max(0, Math.round(msValue / 1000));
  const parts = [];
  for (const [size, unit] of [[86400, "d"], [3600, "h"], [60, "m"], [1, "s"]]) {
    if (s >= size) { parts.push(`${Math.floor(s / size)}${unit}`); s %= size; }
  }
  return parts.slice(0, 2).join("") || "0s";
}
function tone(text) {
  const t = String(text ?? "");
  if (/^(DELIVERED|RUN_SUCCESS|2\d\d)$/.test(t)) return "ok";
  if (/^(FAILED|ERROR|RUN_FAILED|RUN_CANCELED|CANCELED|CANCEL_REQUESTED|[45]\d\d)$/.test(t)) return "bad";
  return "wait";
}
function badge(text) { return `<span class="badge ${tone(text)}">${esc(text)}</span>`; }
function headers(pairs) {
  return pairs && pairs.length ? `<pre>${pairs.map(([k, v]) => `${esc(k)}: ${esc(v)}`).join("\n")}</pre>` : '<span class="empty">none</span>';
}
function body(text) { return text ? `<pre>${esc(text)}</pre>` : '<span class="empty">empty</span>'; }
function more(list) {
  return list.total > list.items.length ? `<p class="more">the newest ${list.items.length} of ${list.total}</p>` : "";
}

async function act(action, payload) {
  const status = document.getElementById("status");
  status.className = "";
  status.textContent = `${action}…`;
  try {
    const answer = await fetch(`${BASE}/act/${action}`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-QStash-Dashboard": "1" },
      body: JSON.stringify(payload || {}),
    });
    const result = await answer.json();
    if (!answer.ok) throw new Error(result.error || answer.statusText);
    const made = Array.isArray(result.deliveries) ? `: ${result.deliveries.length} delivery attempt(s)` : "";
    status.textContent = `${action} done${made}`;
  } catch (error) {
    status.className = "error";
    status.textContent = `${action} failed: ${error.message}`;
  }
  await poll();
}

async function poll() {
  try {
    const answer = await fetch(`${BASE}/data`, { cache: "no-store" });
    if (answer.status === 401) {
      document.getElementById("panel").innerHTML = '<p class="bad">Not signed in: open the dashboard link <code>pytest-qstash serve</code> printed.</p>';
      return;
    }
    const text = await answer.text();
    if (text === lastText) return; // nothing changed: keep the page (and any selection) as is
    lastText = text;
    data = JSON.parse(text);
    render();
  } catch (error) {
    const status = document.getElementById("status");
    status.className = "error";
    status.textContent = `the server does not answer (${error.message})`;
  }
}

function render() {
  const state = data.state;
  document.getElementById("now").textContent = state.now;
  document.getElementById("clock-mode").textContent = `${state.clock} clock`;
  document.getElementById("next-due").textContent = state.next_due || "nothing pending";
  const failing = state.data_dir && state.data_dir.error;
  document.getElementById("plan").textContent = (state.plan || "") + (failing ? ` · data dir not written: ${failing}` : "");
  document.querySelector(".virtual-only").hidden = state.clock !== "virtual";
  const names = [...KNOWN.filter((n) => n in data.lists), ...Object.keys(data.lists).filter((n) => !KNOWN.includes(n) && !HIDDEN.has(n))];
  if (!names.includes(tab)) tab = "messages";
  const nav = names.map((n) =>
    `<button type="button" data-tab="${esc(n)}" class="${n === tab ? "active" : ""}">${esc(TITLES[n] || n)} <span class="count">${data.lists[n].total}</span></button>`).join("");
  const tabs = document.getElementById("tabs");
  if (tabs.dataset.html !== nav) { tabs.innerHTML = nav; tabs.dataset.html = nav; }
  const list = data.lists[tab];
  const view = VIEWS[tab] || generic;
  document.getElementById("panel").innerHTML = list.items.length
    ? view(list.items) + more(list) : `<p class="empty">No ${esc((TITLES[tab] || tab).toLowerCase())} yet.</p>`;
}

function attempt(d) {
  const outcome = d.status === null ? "no answer" : d.status;
  return `<div class="attempt ${d.ok ? "ok" : "bad"}" data-attempt="${esc(d.retried)}">
    <div>${time(d.at)} · retried ${esc(d.retried)} · <b class="status ${tone(d.status)}">${esc(outcome)}</b>${d.error ? ` <span class="bad">${esc(d.error)}</span>` : ""}</div>
    <details><summary>headers sent</summary>${headers(d.headers)}</details>
    <details><summary>response headers</summary>${headers(d.response_headers)}</details>
    <div>response: ${body(d.response_body)}</div></div>`;
}

function messageRow(m) {
  const key = `message:${m.message_id}`;
  const where = [m.queue && `queue ${m.queue}`, m.url_group && `group ${m.url_group}`, m.schedule_id && `schedule ${m.schedule_id}`, m.workflow_run_id && `run ${m.workflow_run_id}`, m.callback_for && `callback for ${m.callback_for}`].filter(Boolean).join(", ");
  let row = `<tr class="item" data-key="${esc(key)}" data-message-id="${esc(m.message_id)}">
    <td class="mono">${esc(m.message_id)}</td><td>${badge(m.state)}</td>
    <td>${esc(m.method)} ${esc(m.url)}${where ? `<br><span class="empty">${esc(where)}</span>` : ""}</td>
    <td>${time(m.created_at)}</td><td>${m.done ? "" : time(m.not_before)}</td>
    <td>${esc(m.retried)}/${esc(m.max_retries)}</td><td class="attempts">${m.deliveries.length}</td></tr>`;
  if (open.has(key)) {
    const redeliver = m.state === "DELIVERED" ? `<button type="button" data-action="redeliver" data-message-id="${esc(m.message_id)}">Redeliver</button>` : "";
    row += `<tr><td class="detail" colspan="7">${redeliver}
      <div>published headers: ${headers(m.headers)}</div><div>body: ${body(m.body)}</div>
      <h4>${m.deliveries.length} attempt(s)</h4>${m.deliveries.map(attempt).join("") || '<p class="empty">not attempted yet</p>'}</td></tr>`;
  }
  return row;
}

function table(head, rows) {
  return `<table><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rows}</tbody></table>`;
}

function stepRows(run, start, span, failing) {
  // Consecutive steps of a parallel group (concurrent > 1) share a bracket.
  const out = [];
  let group = null;
  for (const step of run.steps) {
    const from = ms(step.created_at) - start;
    const until = ms(step.resumes_at) - start;
    const left = span ? (100 * from) / span : 0;
    const width = span ? Math.max(0.5, (100 * (until - from)) / span) : 0;
    const sleeps = SLEEPS.has(step.type) && until > from;
    const row = `<div class="step ${esc(step.type)}" data-step="${esc(step.step_id)}">
      <span class="mono">+${duration(from)}</span>
      <span>${step.target_step ? `plan for #${esc(step.target_step)}` : `#${esc(step.step_id)}`} <b>${esc(step.name)}</b> <span class="badge">${esc(step.type)}</span></span>
      <span class="track">${sleeps ? `<span class="span" style="left:${left}%;width:${width}%" title="until ${esc(step.resumes_at)}"></span>` : ""}<span class="mark" style="left:${left}%"></span></span></div>`;
    if (step.concurrent > 1) {
      if (!group || group.size !== step.concurrent || group.rows.length >= step.concurrent) {
        group = { size: step.concurrent, rows: [] };
        out.push(group);
      }
      group.rows.push(row);
    } else {
      group = null;
      out.push(row);
    }
  }
  if (failing) {
    // Where the run stops: the step after the last that succeeded, at its last attempt.
    const at = ms(failing.delivery.at) - start;
    out.push(`<div class="step failed"><span class="mono">+${duration(at)}</span>
      <span class="bad">${esc(failing.step)}</span>
      <span class="track"><span class="mark" style="left:${span ? (100 * at) / span : 0}%"></span></span></div>`);
  }
  return out.map((r) => typeof r === "string" ? r : `<div class="group"><div class="group-label">parallel ×${r.size}</div>${r.rows.join("")}</div>`).join("");
}

function runCard(run) {
  const failing = data.failing_steps[run.run_id];
  const start = ms(run.created_at);
  const last = Math.max(...run.steps.map((s) => ms(s.resumes_at) || 0), ms(run.completed_at) || 0, failing ? ms(failing.delivery.at) : 0, run.state === "RUN_STARTED" ? ms(data.state.now) : 0, start);
  const failed = failing ? `<div class="failing"><b>${run.state === "RUN_FAILED" ? "failed at" : "retrying"} ${esc(failing.step)}</b> after ${esc(failing.attempts)} attempt(s): ${attempt(failing.delivery)}</div>` : "";
  return `<div class="card" data-run-id="${esc(run.run_id)}">
    <div><span class="mono">${esc(run.run_id)}</span> ${badge(run.state)} ${esc(run.url)}</div>
    <div class="empty">started ${time(run.created_at)}${run.completed_at ? `, ended ${time(run.completed_at)}` : ""}${run.dlq_id ? `, DLQ ${esc(run.dlq_id)}` : ""}</div>
    ${failed}
    <div class="timeline">${run.steps.length || failing ? stepRows(run, start, last - start, failing) : '<p class="empty">no step finished yet</p>'}</div></div>`;
}

function generic(items) {
  const fields = [...new Set(items.flatMap((i) => Object.keys(i)))];
  const cell = (v) => v === null || v === undefined ? "" : typeof v === "object" ? `<code>${esc(JSON.stringify(v))}</code>` : esc(v);
  return table(fields, items.map((i) => `<tr>${fields.map((f) => `<td>${cell(i[f])}</td>`).join("")}</tr>`).join(""));
}

const VIEWS = {
  messages: (items) => table(["id", "state", "destination", "created", "due", "retried", "attempts"], items.map(messageRow).join("")),
  dlq: (items) => table(["dlq id", "message", "url", "failed", "answer", ""], items.map((e) => `<tr data-dlq-id="${esc(e.dlq_id)}">
    <td class="mono">${esc(e.dlq_id)}</td><td class="mono">${esc(e.message_id)}</td><td>${esc(e.url)}</td><td>${time(e.created_at)}</td>
    <td>${badge(e.response_status ?? "no answer")} ${e.error ? esc(e.error) : ""}${body(e.response_body)}</td>
    <td><button type="button" data-action="retry_dlq" data-dlq-id="${esc(e.dlq_id)}">Retry</button></td></tr>`).join("")),
  runs: (items) => items.map(runCard).join(""),
  schedules: (items) => table(["id", "cron", "destination", "next run", "last run", "state"], items.map((s) => `<tr>
    <td class="mono">${esc(s.schedule_id)}</td><td class="mono">${esc(s.cron)}</td><td>${esc(s.method)} ${esc(s.destination)}${s.queue ? ` (queue ${esc(s.queue)})` : ""}</td>
    <td>${s.paused ? "" : time(s.next_run)}</td><td>${time(s.last_run)}</td><td>${s.paused ? badge("paused") : "active"}${s.error ? ` <span class="bad">${esc(s.error)}</span>` : ""}</td></tr>`).join("")),
  queues: (items) => table(["queue", "parallelism", "lag", "state", "created"], items.map((q) => `<tr>
    <td>${esc(q.name)}</td><td>${esc(q.parallelism)}</td><td>${esc(q.lag)}</td><td>${q.paused ? badge("paused") : "active"}</td><td>${time(q.created_at)}</td></tr>`).join("")),
  flow_keys: (items) => table(["key", "parallelism", "rate", "in flight", "waiting", "state"], items.map((k) => `<tr>
    <td class="mono">${esc(k.key)}</td><td>${esc(k.parallelism ?? "—")}</td><td>${k.rate === null ? "—" : `${esc(k.rate)} per ${esc(k.period)}s`}</td>
    <td>${esc(k.active)}</td><td>${esc(k.waiting)}</td><td>${k.paused ? badge("paused") : "active"}</td></tr>`).join("")),
  url_groups: (items) => table(["group", "endpoints", "updated"], items.map((g) => `<tr>
    <td>${esc(g.name)}</td><td>${g.endpoints.map((e) => `${e.name ? `<b>${esc(e.name)}</b> ` : ""}${esc(e.url)}`).join("<br>")}</td><td>${time(g.updated_at)}</td></tr>`).join("")),
  events: (items) => table(["time", "message", "state", "url", "answer"], items.map((e) => `<tr>
    <td>${time(e.time)}</td><td class="mono">${esc(e.message_id)}</td><td>${badge(e.state)}</td><td>${esc(e.url)}</td>
    <td>${e.response_status ?? ""} ${e.error ? `<span class="bad">${esc(e.error)}</span>` : ""}</td></tr>`).join("")),
};

document.addEventListener("click", (event) => {
  const target = event.target.closest("button, tr.item");
  if (!target) return;
  if (target.dataset.tab) {
    tab = target.dataset.tab;
    history.replaceState(null, "", `#${tab}`);
    render();
  } else if (target.id === "tick") {
    act("tick");
  } else if (target.id === "advance-next") {
    if (data && data.state.next_due) act("advance_to", { to: data.state.next_due });
  } else if (target.dataset.action === "retry_dlq") {
    act("retry_dlq", { dlq_id: target.dataset.dlqId });
  } else if (target.dataset.action === "redeliver") {
    act("redeliver", { message_id: target.dataset.messageId });
  } else if (target.dataset.key) {
    if (open.has(target.dataset.key)) open.delete(target.dataset.key); else open.add(target.dataset.key);
    render();
  }
});
document.addEventListener("submit", (event) => {
  event.preventDefault();
  act("advance", { by: document.getElementById("advance-by").value.trim() });
});
poll();
setInterval(() => { if (!document.hidden) poll(); }, POLL_MS);
