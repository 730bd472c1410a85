// The session viewer: sessions from GET /ui/api/sessions, and per session what each turn
// sent (GET /ui/api/sessions/{id}/plans), drawn from the transcript and its checkpoints
// (GET /ui/api/sessions/{id}): the sessions API under /ui, where the login cookie goes.
// The script never holds a key: the login form sends it once to POST /ui/login, whose
// answer sets an HttpOnly cookie this script cannot read, and gives the page token,
// kept in this origin's storage and sent with every call (the cookie alone opens
// nothing: a browser sends it to every port of the host). Everything shown is set as
// text, never parsed as HTML. A session is named by `?id=` (the path's segment `-`): any
// id, `.`, `..` and `/` too, which a browser would rewrite in a path.
"use strict";

const API = "/ui/api";
// Sent with every call: the proxy spends the login cookie only on calls that carry it,
// with the login's page token (before the login: "1").
const PAGE_HEADER = "X-Context-Proxy-Page";
const PAGE_TOKEN = "context-proxy-page-token";
const PARTS = {
  system: "System prompt and tools",
  summary: "Summary segments",
  pinned: "Pinned facts",
  memory: "Memory",
  recall: "Recalled history",
  memory_recall: "Recalled from the memory's other sessions",
  window: "Verbatim window",
};
const PREVIEW_CHARS = 600;

const $ = (id) => document.getElementById(id);
let loaded = [];
let nextAfter = null;

async function call(path, options = {}) {
  const headers = {
    Accept: "application/json",
    [PAGE_HEADER]: localStorage.getItem(PAGE_TOKEN) || "1",
    ...(options.headers || {}),
  };
  const response = await fetch(path, {
    ...options,
    headers,
    credentials: "same-origin",
    cache: "no-store",
  });
  const body = await response.json().catch(() => ({}));
  const message = (body.error && body.error.message) || response.statusText;
  return { response, body, message };
}

async function api(path, options = {}) {
  const { response, body, message } = await call(API + path, options);
  if (response.status === 401) {
    localStorage.removeItem(PAGE_TOKEN); // the login expired, or was revoked
    show("login");
    throw new Error(message);
  }
  if (!response.ok) throw new Error(message);
  return body;
}

async function login(key) {
  const { response, body, message } = await call("/ui/login", {
    method: "POST",
    headers: { Authorization: `Bearer ${key}` },
  });
  if (!response.ok) {
    $("login-error").textContent = message;
    $("login-error").hidden = false;
    return;
  }
  localStorage.setItem(PAGE_TOKEN, body.page_token);
  $("login-error").hidden = true;
  location.hash = "";
  await route();
}

async function logout() {
  await call("/ui/logout", { method: "POST" });
  localStorage.removeItem(PAGE_TOKEN);
  loaded = [];
  $("sessions").tBodies[0].replaceChildren();
  $("turns").replaceChildren();
  $("matches").replaceChildren();
  show("login");
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function show(section) {
  for (const id of ["login", "list", "session"]) $(id).hidden = id !== section;
  $("logout").hidden = section === "login";
}

function fail(error) {
  $("error").textContent = error.message;
  $("error").hidden = false;
}

const when = (seconds) => new Date(seconds * 1000).toLocaleString();
const number = (value) => (value === null ? "–" : Number(value || 0).toLocaleString());
const dollars = (value) =>
  value === null || value === undefined
    ? "unknown"
    : `${value < 0 ? "-" : ""}$${Math.abs(value).toFixed(6)}`;
// A turn's money from its plan record: what it spent, what resending would have cost,
// the net; nothing where no price or usage was known.
const money = (record) =>
  record.cost
    ? `spent ${dollars(record.cost.spent)} (summaries ${dollars(record.cost.summaries)}) · resend ${dollars(record.cost.resend)} · net ${dollars(record.cost.net)}`
    : "no price known";

// -- the sessions list ------------------------------------------------------------------

async function loadSessions(more = false) {
  if (!more) {
    loaded = [];
    nextAfter = null;
  }
  const query = new URLSearchParams({ limit: "100" });
  if (nextAfter) query.set("after", nextAfter);
  const page = await api(`/sessions?${query}`);
  loaded = loaded.concat(page.data);
  nextAfter = page.has_more ? page.next_after : null;
  $("more").hidden = !nextAfter;
  drawSessions();
  show("list");
}

function drawSessions() {
  const words = $("search").value.trim().toLowerCase();
  const rows = $("sessions").tBodies[0];
  rows.replaceChildren();
  const shown = loaded.filter(
    (s) => !words || s.id.toLowerCase().includes(words) || s.tenant.toLowerCase().includes(words),
  );
  for (const session of shown) {
    const row = el("tr");
    row.dataset.session = session.id;
    const name = el("td", session.id);
    name.style.overflowWrap = "anywhere"; // a long id (a JSON blob) wraps, not the table
    row.append(
      name,
      el("td", session.tenant),
      el("td", number(session.messages)),
      el("td", when(session.updated)),
    );
    row.addEventListener("click", () => {
      location.hash = `#/sessions/${encodeURIComponent(session.tenant)}/${encodeURIComponent(session.id)}`;
    });
    rows.append(row);
  }
  $("count").textContent = `${shown.length} of ${loaded.length}${nextAfter ? "+" : ""} sessions`;
}

// -- one session ------------------------------------------------------------------------

async function loadSession(tenant, id) {
  const query = new URLSearchParams({ id, tenant });
  const base = "/sessions/-";
  const [session, plans] = await Promise.all([
    api(`${base}?${query}`),
    api(`${base}/plans?${query}`),
  ]);
  $("session-title").textContent = `Session ${session.id}`;
  $("session-title").style.overflowWrap = "anywhere";
  $("delete").onclick = () => removeSession(`${base}?${query}`, session.id);
  $("find").value = "";
  $("find").onchange = () => findIn(`${base}/search`, query, session);
  $("matches").replaceChildren();
  drawTotals(session, plans.data);
  drawReceipt(session.receipt);
  drawLegend();
  const turns = $("turns");
  turns.replaceChildren();
  for (const record of plans.data.slice().reverse()) turns.append(drawTurn(record, session));
  show("session");
}

function drawTotals(session, records) {
  const saved = records.reduce((sum, r) => sum + r.tokens_saved, 0);
  const pairs = [
    ["Messages", number(session.messages.length)],
    ["Summaries", number(session.checkpoints.length)],
    ["Turns recorded", number(records.length)],
    ["Tokens not sent", number(saved)],
    ["Updated", when(session.updated)],
  ];
  const totals = $("totals");
  totals.replaceChildren();
  for (const [name, value] of pairs) totals.append(el("dt", name), el("dd", value));
  totals.querySelector("dd:nth-of-type(4)").id = "tokens-saved";
}

// The session's receipt (`receipt` of GET /v1/sessions/{id}): null before a priced turn.
function drawReceipt(receipt) {
  const shown = receipt
    ? [
        ["Spent", dollars(receipt.spent), "spent"],
        ["Spent on summaries", dollars(receipt.summaries), "summaries"],
        ["Resending would have cost", dollars(receipt.resend), "resend"],
        ["Net saving", dollars(receipt.net), "net"],
        ["Turns priced", number(receipt.turns), "turns-priced"],
      ]
    : [["Money", "no price known for this session's model", "spent"]];
  const list = $("receipt");
  list.replaceChildren();
  for (const [name, value, id] of shown) {
    const dd = el("dd", value);
    dd.id = `receipt-${id}`;
    list.append(el("dt", name), dd);
  }
}

function drawLegend() {
  const legend = $("legend");
  legend.replaceChildren();
  for (const [kind, label] of Object.entries(PARTS)) {
    const item = el("li", label);
    item.style.setProperty("--swatch", `var(--${kind})`);
    legend.append(item);
  }
}

function drawTurn(record, session) {
  const item = el("li", null, "turn");
  item.dataset.version = record.version;
  const sent =
    record.tokens_sent === null
      ? "Sent whole, far from the budget: not counted"
      : `${number(record.tokens_sent)} of ${number(record.tokens_original)} tokens sent`;
  item.append(
    el("h3", `Turn v${record.version} · ${when(record.at)} · ${record.model} · ${record.compression} · ${sent}`),
    el(
      "div",
      `Budget ${number(record.budget)} · ${number(record.tokens_saved)} tokens not sent · ${money(record)}`,
      "muted",
    ),
  );
  const bar = el("div", null, "tokens");
  bar.title = `${number(record.tokens_sent)} of a ${number(record.budget)}-token budget`;
  for (const part of record.parts) {
    const span = el("span");
    span.className = `part-${part.kind}`;
    span.style.width = `${(100 * part.tokens) / Math.max(record.budget, record.tokens_sent)}%`;
    span.style.background = `var(--${part.kind})`;
    span.title = `${PARTS[part.kind] || part.kind}: ${number(part.tokens)} tokens`;
    bar.append(span);
  }
  item.append(bar);
  const details = el("details");
  details.append(el("summary", "What was sent"));
  for (const part of record.parts) details.append(drawPart(part, session));
  item.append(details);
  return item;
}

function drawPart(part, session) {
  const box = el("div", null, `part part-${part.kind}`);
  box.style.setProperty("--swatch", `var(--${part.kind})`);
  const label = PARTS[part.kind] || part.kind;
  box.append(el("h4", `${label}: ${number(part.tokens)} tokens`));
  const checkpoint = session.checkpoints[(part.checkpoint || 0) - 1];
  if (part.kind === "system") {
    box.append(el("div", "The client's system prompt and tools: sent as the client sent them, not stored.", "muted"));
  } else if (part.kind === "memory" || part.kind === "memory_recall") {
    box.append(el("div", `From memory ${part.memory_id} (GET /v1/memories/${part.memory_id} shows what it holds).`, "muted"));
  } else if (part.kind === "summary") {
    box.append(el("div", `Summary ${part.checkpoint}, of messages ${part.covers[0]}–${part.covers[1] - 1}`, "muted"));
    for (const text of (checkpoint && checkpoint.segments) || []) box.append(el("div", text, "message"));
  } else if (part.kind === "pinned") {
    const list = el("ul");
    for (const fact of (checkpoint && checkpoint.pinned) || []) list.append(el("li", fact));
    box.append(list);
  } else if (part.kind === "recall") {
    for (const start of part.units) box.append(drawMessage(session.messages[start], start));
  } else if (part.kind === "window") {
    const [start, end] = part.range;
    let note = `Messages ${start}–${end - 1}`;
    if (part.dropped) note += `; ${part.dropped} earlier messages dropped without a summary`;
    box.append(el("div", note, "muted"));
    for (let at = start; at < end && at < session.messages.length; at++) {
      box.append(drawMessage(session.messages[at], at));
    }
  }
  return box;
}

function drawMessage(message, at) {
  const box = el("div", null, "message");
  if (!message) return el("div", `message ${at}: no longer stored`, "muted");
  box.append(el("span", `${at} ${message.role}`, "role"));
  let text = typeof message.content === "string" ? message.content : JSON.stringify(message.content);
  if (message.tool_calls) text += ` ${JSON.stringify(message.tool_calls)}`;
  if (text.length > PREVIEW_CHARS) text = `${text.slice(0, PREVIEW_CHARS)} …`;
  box.append(document.createTextNode(text || ""));
  return box;
}

async function findIn(path, query, session) {
  const words = $("find").value.trim();
  const list = $("matches");
  list.replaceChildren();
  if (!words) return;
  const search = new URLSearchParams(query);
  search.set("q", words);
  search.set("limit", "10");
  const found = await api(`${path}?${search}`);
  if (!found.data.length) list.append(el("li", "No message matches.", "muted"));
  for (const match of found.data) {
    const item = el("li");
    item.append(el("div", `Messages ${match.start}–${match.end - 1} (${match.terms.join(", ")})`, "muted"));
    match.messages.forEach((m, i) => item.append(drawMessage(m, match.start + i)));
    list.append(item);
  }
}

async function removeSession(path, id) {
  if (!window.confirm(`Delete session ${id} and everything stored of it?`)) return;
  await api(path, { method: "DELETE" });
  location.hash = "";
}

// -- navigation -------------------------------------------------------------------------

async function route() {
  $("error").hidden = true;
  const match = location.hash.match(/^#\/sessions\/([^/]+)\/(.+)$/);
  try {
    if (match) await loadSession(decodeURIComponent(match[1]), decodeURIComponent(match[2]));
    else await loadSessions();
  } catch (error) {
    if (!$("login").hidden) return;
    fail(error);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("key").value.trim();
    $("key").value = ""; // the page keeps no key, not even in its form
    login(key).catch(fail);
  });
  $("logout").addEventListener("click", () => logout().catch(fail));
  $("home").addEventListener("click", () => {
    location.hash = "";
  });
  $("search").addEventListener("input", drawSessions);
  $("more").addEventListener("click", () => loadSessions(true).catch(fail));
  window.addEventListener("hashchange", route);
  route();
});
