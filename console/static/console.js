// raftka console: polls the console's /api/... JSON and renders it. Plain DOM, no
// framework, nothing fetched from elsewhere. Every value is set as text (never as
// HTML), so a topic name or record cannot inject markup.
"use strict";

const POLL_MS = 1500;
const errors = new Map(); // endpoint -> its last error line (cleared when it answers)
// What each endpoint's error line starts with, so the reader knows which panel is stale.
const LABELS = {
  cluster: "cluster", configs: "topic configs", groups: "consumer groups",
  group: "consumer group", messages: "messages", reports: "chaos reports",
};
let selectedTopic = null;
let selectedGroup = null;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}

function fill(tableId, rows) {
  const body = document.querySelector("#" + tableId + " tbody");
  body.replaceChildren(...rows);
}

function showErrors() {
  const box = document.getElementById("error");
  const lines = [...errors.values()];
  box.hidden = lines.length === 0;
  box.textContent = lines.join("\n");
}

async function getJson(key, url) {
  let answer;
  try {
    const response = await fetch(url, { cache: "no-store" });
    answer = await response.json();
  } catch (e) {
    errors.set(key, LABELS[key] + ": NETWORK_EXCEPTION: the console did not answer (" + e + ")");
    showErrors();
    return null;
  }
  if (answer.error) {
    errors.set(key, LABELS[key] + ": " + answer.error);
    showErrors();
    return null;
  }
  errors.delete(key);
  showErrors();
  return answer;
}

function list(values) {
  return values.length ? values.join(", ") : "none";
}

function renderOverview(o) {
  const epoch = o.epoch === null ? "unknown" : o.epoch;
  const active = o.active_controller === null ? "none" : o.active_controller;
  document.getElementById("summary").textContent =
    `active controller ${active}, Raft epoch ${epoch}, metadata high watermark ` +
    `${o.high_watermark ?? "unknown"}; ${o.topic_count} topics, ${o.partition_count} partitions, ` +
    `${o.under_replicated} under-replicated, ${o.offline} offline` +
    (o.quorum_error ? ` (quorum: ${o.quorum_error})` : "");
  fill("controllers", o.controllers.map((c) => {
    const tr = row([c.id ?? "?", c.address ?? "-", c.active ? "active" : "follower",
                    c.log_end_offset ?? "-", c.lag ?? "-"]);
    if (c.active) tr.cells[2].className = "active";
    tr.dataset.node = c.id;
    return tr;
  }));
  fill("brokers", o.brokers.map((b) => {
    const tr = row([b.id, b.address ?? "-", b.state, b.leader_of]);
    tr.cells[2].className = b.state === "unfenced" ? "ok" : "bad";
    tr.dataset.broker = b.id;
    tr.dataset.state = b.state;
    return tr;
  }));
}

function renderTopics(topics) {
  const internal = document.getElementById("show-internal").checked;
  const rows = [];
  for (const t of topics) {
    if (t.internal && !internal) continue;
    for (const p of t.partitions) {
      let state = "ok", cls = "ok";
      if (p.offline) { state = "offline"; cls = "bad"; }
      else if (p.under_replicated) { state = "under-replicated"; cls = "warn"; }
      const name = el("td", t.name);
      const tr = row([name, p.partition, p.leader ?? "none", list(p.replicas), list(p.isr),
                      el("td", state, cls)]);
      tr.className = "clickable";
      tr.dataset.topic = t.name;
      tr.dataset.partition = p.partition;
      tr.dataset.state = state;
      tr.title = "show this topic's configs";
      tr.addEventListener("click", () => { selectedTopic = t.name; pollConfigs(); });
      rows.push(tr);
    }
  }
  fill("topic-table", rows);
}

async function pollCluster() {
  const answer = await getJson("cluster", "/api/cluster");
  if (answer) {
    renderOverview(answer.overview);
    renderTopics(answer.topics);
    document.getElementById("updated").textContent =
      "updated " + new Date().toLocaleTimeString();
  }
}

async function pollConfigs() {
  if (selectedTopic === null) return;
  const answer = await getJson("configs", "/api/topics/" + encodeURIComponent(selectedTopic) + "/configs");
  if (!answer) return;
  document.getElementById("configs").hidden = false;
  document.getElementById("configs-topic").textContent = answer.topic;
  fill("config-table", answer.configs.map((c) =>
    row([c.name, c.value ?? "(sensitive)", c.source + (c.read_only ? ", read-only" : "")])));
}

async function pollGroups() {
  const answer = await getJson("groups", "/api/groups");
  if (answer) {
    fill("group-table", answer.groups.map((g) => {
      const tr = row([g.group_id, g.state, g.protocol_type]);
      tr.className = "clickable";
      tr.dataset.group = g.group_id;
      tr.addEventListener("click", () => { selectedGroup = g.group_id; pollGroup(); });
      return tr;
    }));
    // A broker that did not answer: the list lacks its groups; say which one.
    const missing = answer.unanswered || [];
    if (missing.length) {
      errors.set("groups-partial", "consumer groups: partial list, " + missing.map((u) =>
        "broker " + u.broker_id + " did not answer: " + u.error).join("; "));
    } else {
      errors.delete("groups-partial");
    }
    showErrors();
  }
  await pollGroup();
}

async function pollGroup() {
  if (selectedGroup === null) return;
  const g = await getJson("group", "/api/groups/" + encodeURIComponent(selectedGroup));
  if (!g) return;
  document.getElementById("group").hidden = false;
  document.getElementById("group-id").textContent = g.group_id;
  document.getElementById("group-state").textContent =
    `(${g.state}, coordinator ${g.coordinator}, total lag ${g.total_lag ?? "unknown"})`;
  fill("member-table", g.members.map((m) => row([m.member_id, m.client_id, m.host, list(m.assignment)])));
  fill("lag-table", g.partitions.map((p) =>
    row([p.topic, p.partition, p.committed ?? "-", p.end_offset ?? "-", p.lag ?? "-", p.member ?? "-"])));
}

async function browse(event) {
  event.preventDefault();
  const form = new FormData(event.target);
  const params = new URLSearchParams({
    topic: form.get("topic"), partition: form.get("partition") || "0",
    limit: form.get("limit") || "20", format: form.get("format"),
  });
  const from = form.get("from");
  if (from !== "beginning") params.set(from, form.get("at") || "0");
  const answer = await getJson("messages", "/api/messages?" + params);
  if (!answer) return;
  const pre = (text) => { const td = el("td"); td.appendChild(el("pre", text ?? "null")); return td; };
  const rows = answer.records.map((r) =>
    row([r.offset, new Date(r.timestamp).toISOString(), pre(r.key), pre(r.value)]));
  if (rows.length === 0) rows.push(row(["no records there"]));
  fill("record-table", rows);
}

async function loadReports() {
  const answer = await getJson("reports", "/api/reports");
  if (!answer) return;
  const note = document.getElementById("reports-note");
  const box = document.getElementById("report-list");
  if (!answer.enabled) {
    note.textContent = "Start the console with --reports DIR to see raftka chaos' timeline pictures.";
    return;
  }
  note.textContent = answer.reports.length ? "" : "No report pictures in the folder yet.";
  box.replaceChildren(...answer.reports.flatMap((r) => {
    const img = el("img");
    img.src = r.url;
    img.alt = r.name;
    img.loading = "lazy";
    return [el("h3", r.name), img];
  }));
}

document.getElementById("browse").addEventListener("submit", browse);
document.getElementById("show-internal").addEventListener("change", pollCluster);

// One poll at a time per kind: the next starts POLL_MS after the previous answered, so
// a slow cluster is never asked twice at once.
function every(ms, poll) {
  const loop = async () => { try { await poll(); } finally { setTimeout(loop, ms); } };
  loop();
}
every(POLL_MS, pollCluster);
every(POLL_MS + 500, pollGroups);
every(10000, loadReports);
