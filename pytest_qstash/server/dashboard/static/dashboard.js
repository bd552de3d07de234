// pytest-qstash's dashboard: polls one page of the list on screen (searched, filtered and
// clipped by the server) and renders it; an opened item is fetched whole. Every view has its
// address (#messages/<id>, #dlq?q=...), so a reload or a shared link opens it again.
// Plain DOM, no libraries, nothing fetched from anywhere but this server.
"use strict";

const BASE = "/_qstash/dashboard";
const POLL_MS = 1000;
const ORDER = ["messages", "dlq", "runs", "schedules", "queues", "flow_keys", "url_groups", "events", "waiters", "workflow_dlq"];
const TITLES = {
  messages: "Messages", dlq: "DLQ", runs: "Workflow runs", schedules: "Schedules",
  queues: "Queues", flow_keys: "Flow control", url_groups: "URL groups", events: "Log",
  waiters: "Waiting for events", workflow_dlq: "Workflow DLQ",
};
const HIDDEN = new Set(["deliveries"]); // shown inside their messages
// Lists whose items have a page of their own.
const PAGES = new Set(["messages", "dlq", "runs", "schedules", "queues", "flow_keys", "url_groups", "waiters", "workflow_dlq"]);
const SLEEPS = new Set(["SleepFor", "SleepUntil", "Wait"]);

let data = null;            // the last poll's answer, its items resolved
let route = readRoute();
let detail = null;          // the opened item, whole: {list, id, item, links, failing}
let detailDigest = null;
let cache = new Map();      // the rows of the page on screen, by key
let since = "";
let viewKey = "";
let lastShown = "";
let inFlight = false;
let again = false;

// -- addresses -------------------------------------------------------------------------------
function readRoute() {
  const [path, query] = location.hash.slice(1).split("?");
  const [tab, ...rest] = (path || "messages").split("/");
  const params = new URLSearchParams(query || "");
  return {
    tab: tab || "messages",
    id: rest.length ? decodeURIComponent(rest.join("/")) : "",
    q: params.get("q") || "",
    state: params.get("state") || "",
    page: Math.max(0, parseInt(params.get("page") || "0", 10) || 0),
  };
}
function href(tab, id, extra) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(extra || {})) if (v) params.set(k, v);
  const query = params.toString();
  return `#${tab}${id ? `/${encodeURIComponent(id)}` : ""}${query ? `?${query}` : ""}`;
}
function listHref() { return href(route.tab, "", { q: route.q, state: route.state, page: route.page || "" }); }
function go(address, replace) {
  if (replace) history.replaceState(null, "", address); else history.pushState(null, "", address);
  route = readRoute();
  requestPoll();
}
window.addEventListener("popstate", () => { route = readRoute(); requestPoll(); });
window.addEventListener("hashchange", () => { route = readRoute(); requestPoll(); });

// -- small pieces ------------------------------------------------------------------------------
function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}
function exact(iso) { return iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC") : ""; }
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
// A time relative to the server's clock (virtual or not), the exact time on hover.
function time(iso) {
  if (!iso) return "—";
  const now = data ? ms(data.state.now) : Date.now();
  const delta = ms(iso) - now;
  const words = Math.abs(delta) < 1000 ? "now" : delta < 0 ? `${duration(-delta)} ago` : `in ${duration(delta)}`;
  return `<time class="when" datetime="${esc(iso)}" title="${esc(exact(iso))}">${esc(words)}</time>`;
}
function tone(text) {
  const t = String(text ?? "");
  if (/^(DELIVERED|RUN_SUCCESS|2\d\d|active)$/.test(t)) return "ok";
  if (/^(FAILED|ERROR|RUN_FAILED|RUN_CANCELED|CANCELED|CANCEL_REQUESTED|[45]\d\d|no answer)$/.test(t)) return "bad";
  return "wait";
}
function badge(text) { return `<span class="badge ${tone(text)}">${esc(text)}</span>`; }
function labels(list) { return (list || []).map((l) => `<span class="tag" title="label">${esc(l)}</span>`).join(" "); }
function link(tab, id, text) { return id ? `<a href="${esc(href(tab, id))}" class="mono" data-link="${esc(tab)}">${esc(text || id)}</a>` : ""; }
function headers(pairs) {
  return pairs && pairs.length ? `<pre>${pairs.map(([k, v]) => `${esc(k)}: ${esc(v)}`).join("\n")}</pre>` : '<span class="empty">none</span>';
}
function body(text, size) {
  if (!text) return '<span class="empty">empty</span>';
  const more = size && size > text.length ? `<div class="empty">the first ${text.length} of ${size} bytes; open it to see all</div>` : "";
  return `<pre>${esc(text)}</pre>${more}`;
}
function table(head, rows) {
  return `<table><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rows}</tbody></table>`;
}
function setStatus(text, error) {
  const status = document.getElementById("status");
  status.className = error ? "error" : "";
  status.textContent = text;
}

// -- talking to the server ---------------------------------------------------------------------
async function act(action, payload) {
  setStatus(`${action}…`);
  try {
    const answer = await fetch(`${BASE}/act/${action}`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-QStash-Dashboard": "1" },
      body: JSON.stringify(payload || {}),
    });
    const result = await answer.json();
    if (!answer.ok) throw new Error(result.error || answer.statusText);
    const made = Array.isArray(result.deliveries) ? `: ${result.deliveries.length} delivery attempt(s)` : "";
    const copy = result.messageId ? `: new message ${result.messageId}` : "";
    setStatus(`${action} done${made}${copy}`);
  } catch (error) {
    setStatus(`${action} failed: ${error.message}`, true);
  }
  detailDigest = null; // the opened item may have changed: fetch it again
  requestPoll();
}

// One poll at a time: a request made while one is under way runs once it ends.
async function requestPoll() {
  if (inFlight) { again = true; return; }
  inFlight = true;
  try {
    do { again = false; await poll(); } while (again);
  } finally {
    inFlight = false;
  }
}

async function poll() {
  const asked = JSON.stringify(route);
  const key = JSON.stringify([route.tab, route.q, route.state, route.page]);
  const params = new URLSearchParams({ list: route.tab, page: String(route.page) });
  if (route.q) params.set("q", route.q);
  if (route.state) params.set("state", route.state);
  if (key === viewKey && since) params.set("since", since);
  if (route.id) params.set("open", route.id);
  let answer;
  try {
    answer = await fetch(`${BASE}/data?${params}`, { cache: "no-store" });
  } catch (error) {
    setStatus(`the server does not answer (${error.message})`, true);
    return;
  }
  if (answer.status === 401) {
    document.getElementById("panel").innerHTML = '<p class="bad">Not signed in: open the dashboard link <code>pytest-qstash serve</code> printed.</p>';
    return;
  }
  const result = await answer.json();
  // The person went elsewhere meanwhile: this answer is for a view no longer on screen.
  if (JSON.stringify(route) !== asked) { again = true; return; }
  if (!answer.ok) {
    if (route.tab !== "messages" && /no list/.test(result.error || "")) { go(href("messages"), true); return; }
    setStatus(result.error || answer.statusText, true);
    return;
  }
  const fresh = key !== viewKey;
  const items = [];
  let changed = fresh;
  for (const item of result.list.items) {
    if (item.same) {
      const known = cache.get(item.key);
      if (!known) { since = ""; viewKey = ""; again = true; return; } // never had it: ask for all
      items.push(known);
    } else {
      items.push(item);
      changed = true;
    }
  }
  cache = new Map(items.map((item) => [item.key, item]));
  since = result.version;
  viewKey = key;
  result.list.items = items;
  data = result;
  if (route.id) {
    const opened = result.open || {};
    if (!detail || detail.list !== route.tab || detail.id !== route.id || opened.digest !== detailDigest) {
      detailDigest = opened.digest;
      detail = await fetchItem(route.tab, route.id);
      changed = true;
      if (JSON.stringify(route) !== asked) { again = true; return; }
    }
  } else if (detail) {
    detail = null;
    changed = true;
  }
  const shown = JSON.stringify([result.state, result.counts, result.list.total, result.list.matched, result.list.states, items.map((i) => i.key), route]);
  if (!changed && shown === lastShown) return; // nothing changed: keep the page (and any selection) as is
  lastShown = shown;
  render();
}

async function fetchItem(list, id) {
  const answer = await fetch(`${BASE}/item?${new URLSearchParams({ list, id })}`, { cache: "no-store" });
  const result = await answer.json();
  return answer.ok ? result : { list, id, error: result.error || answer.statusText };
}

// -- the page ------------------------------------------------------------------------------------
function render() {
  const state = data.state;
  document.getElementById("now").textContent = state.now;
  document.getElementById("now").title = exact(state.now);
  document.getElementById("clock-mode").textContent = `${state.clock} clock`;
  document.getElementById("next-due").textContent = state.next_due || "nothing pending";
  const failing = state.data_dir && state.data_dir.error;
  document.getElementById("plan").textContent = (state.plan || "") + (failing ? ` · data dir not written: ${failing}` : "");
  document.querySelector(".virtual-only").hidden = state.clock !== "virtual";
  document.body.classList.toggle("read-only", Boolean(state.read_only));
  document.getElementById("read-only").hidden = !state.read_only;
  renderHeld(data.held || []);
  const names = [...ORDER.filter((n) => n in data.counts), ...Object.keys(data.counts).filter((n) => !ORDER.includes(n) && !HIDDEN.has(n))];
  const nav = names.map((n) =>
    `<button type="button" data-tab="${esc(n)}" class="${n === route.tab ? "active" : ""}">${esc(TITLES[n] || n.replace(/_/g, " "))} <span class="count">${data.counts[n]}</span></button>`).join("");
  const tabs = document.getElementById("tabs");
  if (tabs.dataset.html !== nav) { tabs.innerHTML = nav; tabs.dataset.html = nav; }
  renderToolbar();
  const panel = document.getElementById("panel");
  if (route.id) {
    panel.innerHTML = renderDetail();
    return;
  }
  const list = data.list;
  const view = VIEWS[route.tab] || generic;
  const what = (TITLES[route.tab] || route.tab).toLowerCase();
  panel.innerHTML = list.items.length ? view(list.items)
    : list.total ? `<p class="empty">Nothing in ${esc(what)} matches.</p>` : `<p class="empty">No ${esc(what)} yet.</p>`;
}

// Deliveries a server holding a loaded export did not send: listed until mounted and retried.
function renderHeld(held) {
  const box = document.getElementById("held");
  box.hidden = !held.length;
  document.getElementById("held-count").textContent = `${held.length} held back`;
  const rows = held.map((h) => `<tr><td class="mono">${esc(h.message_id)}</td><td>${esc(h.kind)}</td><td>${esc(h.url)}</td><td title="${esc(exact(h.held_at))}">${time(h.held_at)}</td></tr>`).join("");
  const html = held.length ? `<p>${esc(held[0].reason)}</p>${table(["message", "kind", "URL", "held"], rows)}<button type="button" data-action="retry_held" title="plan them again: a mounted URL goes to its mount">Retry held</button>` : "";
  const list = document.getElementById("held-list");
  if (list.dataset.html !== html) { list.innerHTML = html; list.dataset.html = html; }
}

function renderToolbar() {
  const bar = document.getElementById("toolbar");
  bar.hidden = Boolean(route.id);
  const search = document.getElementById("search");
  if (document.activeElement !== search && search.value !== route.q) search.value = route.q;
  const select = document.getElementById("state-filter");
  const states = data.list.states;
  const options = [`<option value="">every state (${data.list.total})</option>`,
    ...Object.keys(states).sort().map((s) => `<option value="${esc(s)}">${esc(s)} (${states[s]})</option>`)];
  if (route.state && !(route.state in states)) options.push(`<option value="${esc(route.state)}">${esc(route.state)} (0)</option>`);
  const html = options.join("");
  if (select.dataset.html !== html) { select.innerHTML = html; select.dataset.html = html; }
  select.value = route.state;
  const list = data.list;
  const first = list.matched ? list.page * list.page_size + 1 : 0;
  const last = Math.min(list.matched, (list.page + 1) * list.page_size);
  document.getElementById("paging").textContent = list.matched === list.total
    ? `${first}–${last} of ${list.total}` : `${first}–${last} of ${list.matched} matching (${list.total} in all)`;
  document.getElementById("prev").disabled = list.page === 0;
  document.getElementById("next").disabled = last >= list.matched;
}

// -- rows ----------------------------------------------------------------------------------------
function outcome(m) {
  // What a message's row says about its last attempt, or why there is none yet.
  const last = m.last;
  if (m.state === "ACTIVE") return '<span class="wait">in flight</span>';
  if (!last) return m.done ? "" : `<span class="wait">waiting</span>${m.not_before ? ` · due ${time(m.not_before)}` : ""}`;
  const status = last.status === null ? "no answer" : last.status;
  const error = last.error ? ` <span class="bad error">${esc(last.error)}</span>` : "";
  const answer = !last.ok && last.response_body ? ` <span class="answer mono">${esc(last.response_body.slice(0, 120))}</span>` : "";
  const next = !m.done && m.not_before ? ` · next ${time(m.not_before)}` : "";
  return `<b class="status ${tone(status)}">${esc(status)}</b>${error}${answer}${next}`;
}

function messageRow(m) {
  const where = [m.queue && `queue ${esc(m.queue)}`, m.url_group && `group ${esc(m.url_group)}`,
    m.schedule_id && `schedule ${link("schedules", m.schedule_id)}`, m.workflow_run_id && `run ${link("runs", m.workflow_run_id)}`,
    m.callback_for && `callback for ${link("messages", m.callback_for)}`, m.retried_from && `retry of ${link("messages", m.retried_from)}`].filter(Boolean).join(", ");
  return `<tr class="item" data-href="${esc(href("messages", m.message_id))}" data-message-id="${esc(m.message_id)}">
    <td>${link("messages", m.message_id)}</td><td>${badge(m.state)}</td>
    <td>${esc(m.method)} ${esc(m.url)} ${labels(m.labels)}${where ? `<br><span class="empty">${where}</span>` : ""}</td>
    <td>${time(m.created_at)}</td>
    <td class="attempts" title="attempts made of those allowed (1 + retries)">${esc(m.attempts)}/${esc(m.max_attempts)}</td>
    <td class="outcome">${outcome(m)}</td></tr>`;
}

function dlqRow(e) {
  return `<tr class="item" data-href="${esc(href("dlq", e.dlq_id))}" data-dlq-id="${esc(e.dlq_id)}">
    <td>${link("dlq", e.dlq_id)}</td><td>${link("messages", e.message_id)}</td>
    <td>${esc(e.method)} ${esc(e.url)} ${labels(e.labels)}${e.workflow_run_id ? `<br><span class="empty">run ${link("runs", e.workflow_run_id)}</span>` : ""}</td>
    <td>${time(e.created_at)}</td>
    <td class="outcome">${badge(e.response_status ?? "no answer")} ${e.error ? `<span class="bad error">${esc(e.error)}</span>` : ""}${e.response_body ? `<pre class="answer">${esc(e.response_body.slice(0, 400))}</pre>` : ""}</td>
    <td><button type="button" data-action="retry_dlq" data-dlq-id="${esc(e.dlq_id)}">Retry</button></td></tr>`;
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
    const at = ms(failing.at) - start;
    out.push(`<div class="step failed"><span class="mono">+${duration(at)}</span>
      <span class="bad">${esc(failing.step)}</span>
      <span class="track"><span class="mark" style="left:${span ? (100 * at) / span : 0}%"></span></span></div>`);
  }
  return out.map((r) => typeof r === "string" ? r : `<div class="group"><div class="group-label">parallel ×${r.size}</div>${r.rows.join("")}</div>`).join("");
}

function failingBox(run, failing) {
  if (!failing) return "";
  const status = failing.status === null ? "no answer" : failing.status;
  return `<div class="failing"><b>${run.state === "RUN_FAILED" ? "failed at" : "retrying"} ${esc(failing.step)}</b> after ${esc(failing.attempts)} attempt(s):
    <b class="status ${tone(status)}">${esc(status)}</b>${failing.error ? ` <span class="bad">${esc(failing.error)}</span>` : ""}
    ${failing.response_body ? `<pre>${esc(failing.response_body)}</pre>` : ""}
    <div>${link("messages", failing.message_id, `message ${failing.message_id}`)} · ${time(failing.at)}</div></div>`;
}

function runCard(run) {
  const failing = run.failing;
  const start = ms(run.created_at);
  const last = Math.max(...run.steps.map((s) => ms(s.resumes_at) || 0), ms(run.completed_at) || 0, failing ? ms(failing.at) : 0, run.state === "RUN_STARTED" ? ms(data.state.now) : 0, start);
  const more = run.steps_total > run.steps.length ? `<p class="empty">the first ${run.steps.length} of ${run.steps_total} steps; ${link("runs", run.run_id, "open the run")} for all</p>` : "";
  return `<div class="card" data-run-id="${esc(run.run_id)}">
    <div>${link("runs", run.run_id)} ${badge(run.state)} ${esc(run.url)} ${labels(run.labels)}</div>
    <div class="empty">started ${time(run.created_at)}${run.completed_at ? `, ended ${time(run.completed_at)}` : ""}${run.dlq_id ? `, DLQ ${link("dlq", run.dlq_id)}` : ""}${run.invoker_run_id ? `, invoked by ${link("runs", run.invoker_run_id)}` : ""}</div>
    ${failingBox(run, failing)}
    <div class="timeline">${run.steps.length || failing ? stepRows(run, start, last - start, failing) : '<p class="empty">no step finished yet</p>'}${more}</div></div>`;
}

function generic(items) {
  const fields = [...new Set(items.flatMap((i) => Object.keys(i)))].filter((f) => f !== "key");
  const cell = (v) => v === null || v === undefined ? "" : typeof v === "object" ? `<code>${esc(JSON.stringify(v))}</code>` : esc(v);
  return table(fields, items.map((i) => `<tr>${fields.map((f) => `<td>${cell(i[f])}</td>`).join("")}</tr>`).join(""));
}

const VIEWS = {
  messages: (items) => table(["id", "state", "destination", "created", "attempts", "last attempt"], items.map(messageRow).join("")),
  dlq: (items) => table(["dlq id", "message", "destination", "failed", "the failing answer", ""], items.map(dlqRow).join("")),
  runs: (items) => items.map(runCard).join(""),
  schedules: (items) => table(["id", "cron", "destination", "next run", "last run", "state"], items.map((s) => `<tr class="item" data-href="${esc(href("schedules", s.schedule_id))}">
    <td>${link("schedules", s.schedule_id)}</td><td class="mono">${esc(s.cron)}</td><td>${esc(s.method)} ${esc(s.destination)}${s.queue ? ` (queue ${esc(s.queue)})` : ""}</td>
    <td>${s.paused ? "" : time(s.next_run)}</td><td>${time(s.last_run)}</td><td>${s.paused ? badge("paused") : "active"}${s.error ? ` <span class="bad">${esc(s.error)}</span>` : ""}</td></tr>`).join("")),
  queues: (items) => table(["queue", "parallelism", "lag", "state", "created"], items.map((q) => `<tr>
    <td>${esc(q.name)}</td><td>${esc(q.parallelism)}</td><td>${esc(q.lag)}</td><td>${q.paused ? badge("paused") : "active"}</td><td>${time(q.created_at)}</td></tr>`).join("")),
  flow_keys: (items) => table(["key", "parallelism", "rate", "in flight", "waiting", "state"], items.map((k) => `<tr>
    <td class="mono">${esc(k.key)}</td><td>${esc(k.parallelism ?? "—")}</td><td>${k.rate === null ? "—" : `${esc(k.rate)} per ${esc(k.period)}s`}</td>
    <td>${esc(k.active)}</td><td>${esc(k.waiting)}</td><td>${k.paused ? badge("paused") : "active"}</td></tr>`).join("")),
  url_groups: (items) => table(["group", "endpoints", "updated"], items.map((g) => `<tr>
    <td>${esc(g.name)}</td><td>${g.endpoints.map((e) => `${e.name ? `<b>${esc(e.name)}</b> ` : ""}${esc(e.url)}`).join("<br>")}</td><td>${time(g.updated_at)}</td></tr>`).join("")),
  events: (items) => table(["time", "message", "state", "url", "answer"], items.map((e) => `<tr class="item" data-href="${esc(href("messages", e.message_id))}">
    <td>${time(e.time)}</td><td>${link("messages", e.message_id)}</td><td>${badge(e.state)}</td><td>${esc(e.url)}</td>
    <td>${e.response_status ?? ""} ${e.error ? `<span class="bad">${esc(e.error)}</span>` : ""}</td></tr>`).join("")),
  waiters: (items) => table(["run", "waits for event", "step", "since", "times out"], items.map((w) => `<tr>
    <td>${link("runs", w.run_id)}</td><td class="mono">${esc(w.event_id)}</td><td>${esc(w.step_name)} <span class="badge">${esc(w.step_type)}</span></td>
    <td>${time(w.created_at)}</td><td>${time(w.deadline)}</td></tr>`).join("")),
  workflow_dlq: (items) => table(["dlq id", "run", "workflow", "failed", "the failing answer"], items.map((d) => `<tr>
    <td>${link("dlq", d.dlq_id)}</td><td>${link("runs", d.run_id)}</td><td>${esc(d.workflow_url)} ${labels(d.labels)}</td><td>${time(d.created_at)}</td>
    <td>${badge(d.response_status ?? "no answer")}${d.response_body ? `<pre class="answer">${esc(d.response_body.slice(0, 400))}</pre>` : ""}</td></tr>`).join("")),
};

// -- an opened item --------------------------------------------------------------------------------
function renderDetail() {
  const back = `<p><a href="${esc(listHref())}" id="back">← ${esc(TITLES[route.tab] || route.tab)}</a></p>`;
  if (!detail) return `${back}<p class="empty">Loading…</p>`;
  if (detail.error) return `${back}<p class="bad">${esc(detail.error)}</p>`;
  const view = DETAILS[detail.list] || genericDetail;
  return `${back}<div class="detail" data-open="${esc(detail.list)}/${esc(detail.id)}">${view(detail.item, detail.links || {}, detail)}</div>`;
}

function attempt(d, allowed) {
  const outcomeText = d.status === null ? "no answer" : d.status;
  return `<div class="attempt ${d.ok ? "ok" : "bad"}" data-attempt="${esc(d.retried + 1)}">
    <div>attempt ${esc(d.retried + 1)}${allowed ? ` of ${esc(allowed)}` : ""} · ${time(d.at)} · <b class="status ${tone(outcomeText)}">${esc(outcomeText)}</b>${d.error ? ` <span class="bad">${esc(d.error)}</span>` : ""}</div>
    <details><summary>headers sent</summary>${headers(d.headers)}</details>
    <details><summary>response headers</summary>${headers(d.response_headers)}</details>
    <div>response: ${body(d.response_body)}</div></div>`;
}

function linkList(tab, ids) { return ids && ids.length ? ids.map((id) => link(tab, id)).join(", ") : ""; }
function related(pairs) {
  const shown = pairs.filter(([, html]) => html);
  return shown.length ? `<dl class="links">${shown.map(([name, html]) => `<dt>${esc(name)}</dt><dd>${html}</dd>`).join("")}</dl>` : "";
}

// The faults a simulation (serve --simulate) injected on an item, one line each.
function faults(list, withMessage) {
  return (list || []).map((f) => `${badge(f.kind)} ${time(f.time)}${withMessage ? ` ${link("messages", f.message)}` : ""} ${esc(f.description)}`).join("<br>");
}

const DETAILS = {
  messages: (m, links) => {
    const allowed = m.max_retries + 1;
    const redeliver = m.state === "DELIVERED" ? `<button type="button" data-action="redeliver" data-message-id="${esc(m.message_id)}">Redeliver</button>` : "";
    const log = (links.log || []).map((e) => `<tr><td>${time(e.time)}</td><td>${badge(e.state)}</td><td>${e.response_status ?? ""} ${e.error ? `<span class="bad">${esc(e.error)}</span>` : ""}</td></tr>`).join("");
    return `<h2><span class="mono">${esc(m.message_id)}</span> ${badge(m.state)} ${labels(m.label ? m.label.split(",") : [])}</h2>
      <p>${esc(m.method)} ${esc(m.url)} · created ${time(m.created_at)}${m.done ? "" : ` · due ${time(m.not_before)}`} · ${esc(m.deliveries.length)} of ${esc(allowed)} attempts ${redeliver}</p>
      ${related([["DLQ entry", linkList("dlq", links.dlq)], ["retry of", link("messages", links.retried_from)], ["retried as", linkList("messages", links.retried_as)],
        ["callback for", link("messages", links.callback_for)], ["callbacks", linkList("messages", links.callbacks)], ["workflow run", link("runs", links.run)], ["began run", link("runs", links.started_run)], ["schedule", link("schedules", links.schedule)], ["simulated faults", faults(links.faults, false)]])}
      <h3>${m.deliveries.length} attempt(s)</h3>${m.deliveries.slice().reverse().map((d) => attempt(d, allowed)).join("") || '<p class="empty">not attempted yet</p>'}
      <details><summary>published headers</summary>${headers(m.headers)}</details><div>body: ${body(m.body)}</div>
      <h3>Log</h3>${log ? table(["time", "state", "answer"], log) : '<p class="empty">nothing logged</p>'}`;
  },
  dlq: (e, links) => `<h2><span class="mono">${esc(e.dlq_id)}</span> ${badge(e.response_status ?? "no answer")}</h2>
      <p>${esc(e.url)} · failed ${time(e.created_at)} · after ${esc(e.retried + 1)} attempt(s) <button type="button" data-action="retry_dlq" data-dlq-id="${esc(e.dlq_id)}">Retry</button></p>
      ${related([["message", link("messages", links.message)], ["retry of", link("messages", links.retried_from)], ["retried as", linkList("messages", links.retried_as)], ["workflow run", link("runs", links.run)]])}
      <h3>The failing answer</h3>${e.error ? `<p class="bad">${esc(e.error)}</p>` : ""}<details><summary>response headers</summary>${headers(e.response_headers)}</details><div>${body(e.response_body)}</div>
      <h3>The message</h3><div>${body(e.body)}</div>`,
  runs: (run, links, opened) => {
    const row = { ...run, failing: opened.failing, steps_total: run.steps.length };
    const waiters = (links.waiters || []).map((w) => `${esc(w.step_name)} waits for <span class="mono">${esc(w.event_id)}</span> until ${time(w.deadline)}`).join("<br>");
    return `${runCard(row)}${related([["invoked by", link("runs", links.invoker)], ["invoked", linkList("runs", links.invoked)], ["waiting for", waiters],
      ["DLQ entry", link("dlq", links.dlq)], ["resumes", link("dlq", links.resumed_from)], ["begun by", link("messages", links.started_by)], ["messages", linkList("messages", links.messages)], ["simulated faults", faults(links.faults, true)]])}
      <details><summary>steps and their results</summary>${table(["#", "name", "type", "result"], run.steps.map((s) => `<tr><td>${esc(s.step_id)}</td><td>${esc(s.name)}</td><td>${esc(s.type)}</td><td><code>${esc(JSON.stringify(s.out))}</code></td></tr>`).join(""))}</details>
      <div>body: ${body(run.body)}</div>`;
  },
  schedules: (s, links) => `${genericDetail(s)}${related([["messages", linkList("messages", links.messages)]])}`,
};

function genericDetail(item) {
  const cell = (v) => v === null || v === undefined ? "" : typeof v === "object" ? `<pre>${esc(JSON.stringify(v, null, 2))}</pre>` : esc(v);
  return `<table class="fields">${Object.entries(item).map(([k, v]) => `<tr><th>${esc(k)}</th><td>${cell(v)}</td></tr>`).join("")}</table>`;
}

// -- what a person does -------------------------------------------------------------------------
document.addEventListener("click", (event) => {
  const target = event.target.closest("a, button, tr.item");
  if (!target || target.tagName === "A") return; // links change the address: the route follows
  if (target.dataset.tab) {
    go(href(target.dataset.tab), false);
  } else if (target.id === "tick") {
    act("tick");
  } else if (target.id === "advance-next") {
    if (data && data.state.next_due) act("advance_to", { to: data.state.next_due });
  } else if (target.id === "prev" || target.id === "next") {
    route.page = Math.max(0, route.page + (target.id === "next" ? 1 : -1));
    go(listHref(), true);
  } else if (target.dataset.action === "retry_dlq") {
    event.stopPropagation();
    act("retry_dlq", { dlq_id: target.dataset.dlqId });
  } else if (target.dataset.action === "retry_held") {
    act("retry_held");
  } else if (target.dataset.action === "redeliver") {
    act("redeliver", { message_id: target.dataset.messageId });
  } else if (target.dataset.href && !window.getSelection().toString()) {
    go(target.dataset.href, false);
  }
});
let typing = null;
document.getElementById("search").addEventListener("input", (event) => {
  clearTimeout(typing);
  typing = setTimeout(() => {
    route.q = event.target.value.trim();
    route.page = 0;
    go(listHref(), true);
  }, 200);
});
document.getElementById("state-filter").addEventListener("change", (event) => {
  route.state = event.target.value;
  route.page = 0;
  go(listHref(), true);
});
document.getElementById("time-controls").addEventListener("submit", (event) => {
  event.preventDefault();
  act("advance", { by: document.getElementById("advance-by").value.trim() });
});

// Polls follow one another (never two at once), and stop while the tab is hidden.
function schedulePoll() {
  setTimeout(async () => {
    if (!document.hidden) await requestPoll();
    schedulePoll();
  }, POLL_MS);
}
requestPoll();
schedulePoll();
