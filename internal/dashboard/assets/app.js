// herald's dashboard: polls the node's state and draws it. Every value
// from the server goes into the page as text (textContent), never as HTML.
"use strict";

const base = document.body.dataset.base;
const pollMs = 2000;
const api = "/herald.v1.HeraldService/";
const tokenKey = "herald-token";
const svgNS = "http://www.w3.org/2000/svg";

const topicsEl = document.getElementById("topics");
const statusEl = document.getElementById("status");
const loginEl = document.getElementById("login");
const forgetEl = document.getElementById("forget");
const views = new Map(); // topic name -> its elements
let timer = null;

// AuthError is a request the server refused for want of a (better) token.
class AuthError extends Error {}

async function call(path, init) {
  const token = sessionStorage.getItem(tokenKey);
  init = init || {};
  init.headers = Object.assign({}, init.headers, token ? { Authorization: "Bearer " + token } : {});
  const resp = await fetch(path, init);
  const text = await resp.text();
  if (resp.status === 401) throw new AuthError(message(text));
  if (!resp.ok) throw new Error(message(text) || resp.status + " " + resp.statusText);
  return JSON.parse(text);
}

// message is the error message of a Connect JSON error, or the text.
function message(text) {
  try { return JSON.parse(text).message || text; } catch (e) { return text.trim(); }
}

function rpc(method, body) {
  return call(api + method, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

const fmtInt = new Intl.NumberFormat("en");
function fmtNum(n) { return fmtInt.format(n); }
function fmtRate(r) { return r >= 100 ? fmtInt.format(Math.round(r)) : r.toFixed(r >= 10 ? 1 : 2); }
function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i === 0 ? b : b.toFixed(1)) + " " + units[i];
}
function fmtAge(s) {
  if (s <= 0) return "–";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  if (s < 86400) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

// ago says how long ago something happened, from its age in seconds; a
// negative age means it never did.
function ago(age) {
  if (age < 0) return "never";
  return age < 1 ? "just now" : fmtAge(age) + " ago";
}

const fmtClock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });

function figure(label, name) {
  const value = el("div", { class: "value", "data-figure": name }, "–");
  return { box: el("div", { class: "figure" }, el("div", { class: "label" }, label), value), value };
}

// chart is an SVG of lines over the same time axis, scaled to their
// maximum, with the times of its first, middle and last samples below it.
// A chart of counts (integer) says its maximum as a whole number.
function chart(label, lines, integer) {
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("viewBox", "0 0 300 90");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const legend = el("div", { class: "legend" });
  const paths = lines.map(l => {
    const p = document.createElementNS(svgNS, "polyline");
    p.setAttribute("fill", "none");
    p.style.stroke = l.color;
    p.setAttribute("stroke-width", "1.6");
    p.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(p);
    const i = el("i");
    i.style.background = l.color;
    legend.append(el("span", {}, i, l.name));
    return p;
  });
  const maxEl = el("span", { class: "note" });
  const ticks = [el("span"), el("span"), el("span")];
  const axis = el("div", { class: "axis", "aria-hidden": "true" }, ...ticks);
  const box = el("div", { class: "chart" }, el("div", { class: "label" }, label, " ", maxEl), svg, axis, legend);
  return {
    box,
    draw(series, times) {
      const n = Math.max(0, ...series.map(s => s.length));
      const top = Math.max(integer ? 1 : 1e-9, ...series.flat());
      maxEl.textContent = n ? "(max " + (integer ? fmtNum(Math.round(top)) : fmtRate(top)) + ")" : "(collecting…)";
      const at = [0, Math.floor((times.length - 1) / 2), times.length - 1];
      ticks.forEach((t, i) => { t.textContent = times.length > i ? fmtClock.format(new Date(times[at[i]])) : ""; });
      series.forEach((s, k) => {
        const pts = s.map((v, i) => ((n <= 1 ? 300 : (i * 300) / (n - 1)).toFixed(1) + "," + (88 - (v / top) * 84).toFixed(1)));
        paths[k].setAttribute("points", pts.join(" "));
      });
    },
  };
}

function topicView(name) {
  const figures = {
    events: figure("Backlog (events)", "events"),
    bytes: figure("Backlog (bytes)", "bytes"),
    age: figure("Oldest event", "oldest"),
    pub: figure("Published /s", "publish-rate"),
    del: figure("Delivered /s", "delivery-rate"),
    retried: figure("Retries", "retried"),
    dead: figure("Dead letters", "dead-letters"),
    tiered: figure("Local log / in object store", "tiered"),
  };
  figures.tiered.box.hidden = true; // shown for a topic that tiers
  const rates = chart("Publish and delivery rate (events/s)", [{ name: "published", color: "var(--pub)" }, { name: "delivered", color: "var(--del)" }]);
  const backlog = chart("Backlog (events)", [{ name: "backlog", color: "var(--back)" }, { name: "dead letters", color: "var(--bad)" }], true);
  const shardHead = el("tr");
  const shardBody = el("tbody");
  const shards = el("details", {}, el("summary", {}, "Shards"), el("table", {}, el("thead", {}, shardHead), shardBody));
  const dead = el("div", { class: "dead" });
  const endpoint = el("div", { class: "endpoint" });
  const health = el("p", { class: "health", "data-health": "" });
  const subsBody = el("tbody");
  const subs = el("div", { class: "subs" }, el("h3", {}, "Subscriptions"),
    el("table", {}, el("thead", {}, el("tr", {}, ...subscriptionColumns.map(h => el("th", { class: subscriptionTextColumns.has(h) ? "text" : "" }, h)))), subsBody));
  const section = el("section", { class: "topic", "data-topic": name }, el("h2", {}, name), endpoint, health,
    el("div", { class: "figures" }, ...Object.values(figures).map(f => f.box)),
    el("div", { class: "charts" }, rates.box, backlog.box), subs, shards, dead);
  // dead shows the dead letters of one subscription, deadSub: "" is the
  // topic's default one, whose button is the topic's.
  return { section, figures, rates, backlog, shardHead, shardBody, subs, subsBody, dead, endpoint, health, deadOpen: false, deadCount: -1, deadSub: "" };
}

const subscriptionColumns = ["Subscription", "Endpoint", "Filter", "Lag", "Oldest", "Delivered /s", "Dead letters", "Health", "State", ""];
const subscriptionTextColumns = new Set(["Endpoint", "Filter", "Health", "State"]);

// subscriptionRow is a subscription's row: where it delivers what, how far
// behind it is, how its pushes go (as far as this node knows: it keeps the
// health of the shards it leads), and buttons to disable or enable it, to
// replay it from the earliest event its topic holds (a persistent topic's)
// and, if it has dead letters, to show them in the topic's dead-letter box.
function subscriptionRow(t, v, s) {
  const topic = t.name;
  const h = subscriptionHealth(s);
  const buttons = [s.disabled
    ? el("button", { type: "button", "data-action": "enable-subscription", onclick: () => setSubscriptionEnabled(topic, s.name, true) }, "Enable")
    : el("button", { type: "button", class: "danger", "data-action": "disable-subscription", onclick: () => setSubscriptionEnabled(topic, s.name, false) }, "Disable")];
  if (t.persistent) {
    buttons.push(el("button", { type: "button", "data-action": "seek-earliest", onclick: () => seekEarliest(topic, s.name) }, "Replay from earliest"));
  }
  if (s.dead_letters > 0) {
    buttons.push(el("button", { type: "button", "data-action": "show-subscription-dead", onclick: () => showDead(topic, v, s.name) },
      "Dead letters (" + fmtNum(s.dead_letters) + ")"));
  }
  return el("tr", { "data-subscription": s.name },
    el("td", {}, s.name),
    el("td", { class: "text long" + (s.push_endpoint ? "" : " note") }, s.push_endpoint || "pull"),
    el("td", { class: "text long" }, s.filter || "–"),
    // A shard that cannot count leaves the lag unknown; its reason is the tooltip.
    el("td", Object.assign({ "data-cell": "lag" }, s.error ? { title: s.error } : {}), s.error ? "?" : fmtNum(s.events)),
    el("td", {}, fmtAge(s.oldest_age_seconds)),
    el("td", { "data-cell": "rate" }, fmtRate(s.delivery_rate)),
    el("td", { "data-cell": "dead", class: s.dead_letters > 0 ? "bad" : "" }, fmtNum(s.dead_letters)),
    el("td", { "data-cell": "health", class: "text" + (h.bad ? " bad" : h.unknown ? " note" : "") }, h.text),
    el("td", { "data-cell": "state", class: "text" + (s.disabled ? " bad" : "") }, s.disabled ? "disabled " + ago(s.disabled_age_seconds) + (s.disabled_reason ? ": " + s.disabled_reason : "") : "enabled"),
    el("td", { class: "buttons" }, ...buttons));
}

// subscriptionHealth says how a subscription's pushes are going.
function subscriptionHealth(s) {
  if (!s.push_endpoint) return { text: "pull" };
  const h = s.delivery;
  // A disabled subscription's shards run no dispatcher, which keeps the health.
  if (!h && s.disabled) return { text: "not delivering", unknown: true };
  if (!h) return { text: "known to its shards' leaders, other nodes", unknown: true };
  let text;
  if (h.consecutive_failures > 0) {
    text = "failing: " + fmtNum(h.consecutive_failures) + (h.consecutive_failures === 1 ? " failed attempt" : " failed attempts") +
      (h.failing_for_seconds > 0 ? " for " + fmtAge(h.failing_for_seconds) : "") + "; last error " + ago(h.last_error_age_seconds) + ": " + h.last_error;
  } else {
    text = "ok, last success " + ago(h.last_success_age_seconds);
  }
  if (h.paused_for_seconds > 0) text += "; paused " + fmtAge(h.paused_for_seconds) + " more, as the endpoint asked";
  if (s.partial) text += " (shards led by other nodes not included)";
  return { text, bad: h.consecutive_failures > 0 };
}

// setSubscriptionEnabled enables a subscription, or disables it with the
// reason the user gives (none if they cancel).
async function setSubscriptionEnabled(topic, name, enable) {
  const body = { topic, name };
  if (!enable) {
    const reason = prompt("Disable subscription " + name + " of " + topic + "? It delivers nothing until enabled again. Why?", "");
    if (reason === null) return;
    body.reason = reason;
  }
  try {
    await rpc(enable ? "EnableSubscription" : "DisableSubscription", body);
    notice((enable ? "enabled" : "disabled") + " subscription " + name + " of " + topic);
  } catch (e) {
    notice(e.message, true);
    if (e instanceof AuthError) askToken(e.message);
  }
  poll();
}

// seekEarliest moves a subscription's cursor to the earliest event its
// topic holds, once the user confirms: all of them are delivered to it
// again, in order.
async function seekEarliest(topic, name) {
  if (!confirm("Replay subscription " + name + " of " + topic + " from the earliest event? Every event the topic still holds will be delivered to this subscription again, those it already received included.")) return;
  try {
    const r = await rpc("SeekSubscription", { topic, subscription: name, earliest: true });
    const n = Number(r.replayed || 0); // an int64: a string in JSON, absent if 0
    notice("replayed " + fmtNum(n) + (n === 1 ? " event" : " events") + " from the earliest to subscription " + name + " of " + topic);
  } catch (e) {
    notice(e.message, true);
    if (e instanceof AuthError) askToken(e.message);
  }
  poll();
}

const shardColumns = ["Shard", "Events", "Bytes", "Oldest", "Published", "Delivered", "Retries", "Dead letters", "Leased"];
const pushColumns = ["Failing", "Last success", "Last push error"];

// shardRow is a shard's row of the Shards table; push topics' rows end
// with how the shard's pushes are going, which only its leader knows.
function shardRow(s, push) {
  const cols = shardColumns.length + (push ? pushColumns.length : 0);
  if (s.error) return el("tr", { "data-shard": s.name }, el("td", {}, s.name), el("td", { class: "error", colspan: String(cols - 1) }, s.error));
  // A tiered shard's bytes say how much of its log is in the object store.
  const bytes = s.tiered_bytes > 0 ? fmtBytes(s.bytes) + " (" + fmtBytes(s.tiered_bytes) + " tiered)" : fmtBytes(s.bytes);
  const cells = [fmtNum(s.events), bytes, fmtAge(s.oldest_age_seconds), fmtNum(s.published),
    fmtNum(s.delivered), fmtNum(s.retried), fmtNum(s.dead_letters), fmtNum(s.leased)].map(x => el("td", {}, x));
  if (push) {
    const h = s.delivery;
    if (!h) {
      cells.push(el("td", { class: "note", colspan: "3" }, "known to the shard's leader, another node"));
    } else {
      cells.push(el("td", { class: h.consecutive_failures > 0 ? "bad" : "" }, fmtNum(h.consecutive_failures)),
        el("td", {}, ago(h.last_success_age_seconds)),
        el("td", { class: "text" + (h.consecutive_failures > 0 ? " bad" : "") }, h.last_error ? ago(h.last_error_age_seconds) + ": " + h.last_error : "–"));
    }
  }
  return el("tr", { "data-shard": s.name }, el("td", {}, s.name), ...cells);
}

// healthText says how a push topic's deliveries are going, from the
// shards this node leads.
function healthText(t) {
  const h = t.total.delivery;
  const partial = t.shards.some(s => !s.error && !s.delivery);
  if (!h) return { text: "Delivery health is known to each shard's leader; this node leads none of this topic's shards.", bad: false };
  let text;
  if (h.consecutive_failures > 0) {
    text = "Failing: " + fmtNum(h.consecutive_failures) + (h.consecutive_failures === 1 ? " failed attempt" : " failed attempts") + " since the last success (" + ago(h.last_success_age_seconds) +
      "). Last error " + ago(h.last_error_age_seconds) + ": " + h.last_error;
  } else {
    text = "Delivering: last success " + ago(h.last_success_age_seconds) + "." +
      (h.last_error ? " Last error " + ago(h.last_error_age_seconds) + ": " + h.last_error : "");
  }
  if (partial) text += " (Shards led by other nodes are not included.)";
  return { text, bad: h.consecutive_failures > 0 };
}

function render(state) {
  const seen = new Set();
  for (const t of state.topics) {
    seen.add(t.name);
    let v = views.get(t.name);
    if (!v) {
      v = topicView(t.name);
      views.set(t.name, v);
      topicsEl.append(v.section);
    }
    const f = v.figures, tot = t.total;
    v.endpoint.textContent = t.push_endpoint ? "pushes to " + t.push_endpoint : "pull consumers";
    f.events.value.textContent = fmtNum(tot.events);
    f.bytes.value.textContent = fmtBytes(tot.bytes);
    f.age.value.textContent = fmtAge(tot.oldest_age_seconds);
    f.pub.value.textContent = fmtRate(tot.publish_rate);
    f.del.value.textContent = fmtRate(tot.delivery_rate);
    f.retried.value.textContent = fmtNum(tot.retried);
    f.dead.value.textContent = fmtNum(tot.dead_letters);
    // Tiering: where the backlog is, once any of it is in the object store.
    f.tiered.box.hidden = !(tot.tiered_bytes > 0 || tot.tier_error);
    f.tiered.value.textContent = fmtBytes(tot.local_bytes) + " / " + fmtBytes(tot.tiered_bytes);
    f.tiered.value.title = tot.tier_error ? "tiering failed: " + tot.tier_error : "";
    f.tiered.box.classList.toggle("bad", !!tot.tier_error);
    f.dead.box.classList.toggle("bad", tot.dead_letters > 0);
    v.rates.draw([t.history.publish_rate, t.history.delivery_rate], t.history.time);
    v.backlog.draw([t.history.backlog, t.history.dead_letters], t.history.time);
    const push = !!t.push_endpoint;
    v.health.hidden = !push;
    if (push) {
      const h = healthText(t);
      v.health.textContent = h.text;
      v.health.classList.toggle("bad", h.bad);
    }
    v.shardHead.replaceChildren(...shardColumns.concat(push ? pushColumns : []).map(h => el("th", { class: h === "Last push error" ? "text" : "" }, h)));
    v.shardBody.replaceChildren(...t.shards.map(s => shardRow(s, push)));
    const subs = t.subscriptions || [];
    v.subs.hidden = subs.length === 0;
    v.subsBody.replaceChildren(...subs.map(s => subscriptionRow(t, v, s)));
    // A subscription's dead letters show until it has none (or is gone);
    // then the box is the topic's again.
    let deadSub = v.deadSub && subs.find(s => s.name === v.deadSub);
    if (v.deadSub && !(deadSub && deadSub.dead_letters > 0)) {
      v.deadSub = "";
      v.deadOpen = false;
      v.deadCount = -1;
      deadSub = null;
    }
    renderDeadSummary(t.name, v, deadSub ? deadSub.dead_letters : tot.dead_letters);
  }
  for (const [name, v] of views) {
    if (!seen.has(name)) { v.section.remove(); views.delete(name); }
  }
  document.getElementById("empty").hidden = state.topics.length > 0;
}

function renderDeadSummary(name, v, count) {
  if (count === v.deadCount) return;
  v.deadCount = count;
  v.dead.dataset.subscription = v.deadSub;
  if (count === 0) { v.deadOpen = false; v.dead.replaceChildren(); return; }
  if (v.deadOpen) { loadDead(name, v); return; }
  v.dead.replaceChildren(el("div", { class: "actions" },
    el("button", { type: "button", "data-action": "show-dead", onclick: () => { v.deadOpen = true; loadDead(name, v); } },
      "Show dead letters (" + fmtNum(count) + ")")));
}

// showDead opens the topic's dead-letter box on the dead letters of one of
// its subscriptions.
function showDead(name, v, sub) {
  v.deadSub = sub;
  v.deadOpen = true;
  v.deadCount = -1;
  loadDead(name, v);
}

// loadDead lists, in the topic's dead-letter box, the dead letters of the
// subscription it shows (v.deadSub), with buttons to replay and purge them.
async function loadDead(name, v) {
  const sub = v.deadSub;
  const of = sub ? "subscription " + sub + " of " + name : name;
  let list;
  try {
    list = (await rpc("ListDeadLetters", { topic: name, subscription: sub, max: 100 })).deadLetters || [];
  } catch (e) {
    v.dead.replaceChildren(el("p", { class: "note" }, "Dead letters cannot be listed: " + e.message));
    if (e instanceof AuthError) askToken(e.message);
    return;
  }
  if (v.deadSub !== sub || !v.deadOpen) return; // another box was asked for meanwhile
  const rows = list.map(d => el("tr", { "data-id": d.event.id },
    el("td", { class: "text" }, d.event.id), el("td", { class: "text" }, d.event.key || ""),
    el("td", { class: "text" }, d.reason || ""), el("td", { class: "text" }, d.lastError || ""),
    el("td", { class: "text" }, d.deadAt ? new Date(d.deadAt).toLocaleString() : ""),
    el("td", {}, el("button", { type: "button", "data-action": "replay", onclick: () => act(name, sub, v, "ReplayDeadLetters", [d.event.id]) }, "Replay"), " ",
      el("button", { type: "button", class: "danger", "data-action": "purge", onclick: () => act(name, sub, v, "PurgeDeadLetters", [d.event.id], "Purge dead letter " + d.event.id + (sub ? " of subscription " + sub : "") + " for good?") }, "Purge"))));
  v.dead.dataset.subscription = sub;
  v.dead.replaceChildren(
    el("div", { class: "actions" },
      el("strong", {}, sub ? "Dead letters of subscription " + sub : "Dead letters"),
      el("button", { type: "button", "data-action": "replay-all", onclick: () => act(name, sub, v, "ReplayDeadLetters", []) }, "Replay all"),
      el("button", { type: "button", class: "danger", "data-action": "purge-all", onclick: () => act(name, sub, v, "PurgeDeadLetters", [], "Purge every dead letter of " + of + " for good?") }, "Purge all"),
      el("button", { type: "button", onclick: () => { v.deadOpen = false; v.deadSub = ""; v.deadCount = -1; poll(); } }, "Hide")),
    el("table", {}, el("thead", {}, el("tr", {}, ...["Event", "Key", "Reason", "Last error", "Dead since", ""].map(h => el("th", {}, h)))), el("tbody", {}, ...rows)));
}

// act replays or purges dead letters of a subscription (sub; "" is the
// topic's default one): those of ids, or all of them.
async function act(name, sub, v, method, ids, confirmText) {
  if (confirmText && !confirm(confirmText)) return;
  try {
    const r = await rpc(method, { topic: name, subscription: sub, ids });
    const n = r.replayed !== undefined ? r.replayed : r.purged || 0;
    notice((method === "ReplayDeadLetters" ? "replayed " : "purged ") + n + " of " + (sub ? "subscription " + sub + " of " + name : name));
  } catch (e) {
    notice(e.message, true);
    if (e instanceof AuthError) askToken(e.message);
  }
  v.deadCount = -1;
  poll();
}

// The Nodes section comes from the ClusterStatus procedure, which needs an
// admin token; without one it says so and the topics still show.
const clusterEl = document.getElementById("cluster");
const clusterNoteEl = document.getElementById("cluster-note");
const nodesEl = document.getElementById("nodes");
const placementEl = document.getElementById("placement");

async function loadCluster() {
  let st;
  try {
    st = await rpc("ClusterStatus", {});
  } catch (e) {
    clusterEl.hidden = false;
    clusterNoteEl.textContent = "Nodes cannot be listed: " + e.message;
    unreachable = [];
    nodesEl.replaceChildren();
    placementEl.replaceChildren();
    return;
  }
  clusterEl.hidden = false;
  const down = (st.nodes || []).filter(n => !n.reachable);
  unreachable = down.map(n => "node " + n.id + (n.address ? " (" + n.address + ")" : ""));
  clusterNoteEl.textContent = "As node " + st.nodeId + " sees them; the controller's leader is " + (st.controllerLeader || "unknown") + "." +
    (down.length ? " Unreachable: " + unreachable.join(", ") + ". What only " + (down.length > 1 ? "they know is" : "it knows is") +
      " missing: its replicas' state below, and the delivery health of the shards it leads." : "");
  clusterNoteEl.classList.toggle("bad", down.length > 0);
  nodesEl.replaceChildren(...(st.nodes || []).map(n => el("tr", { "data-node": n.id },
    el("td", {}, n.id), el("td", { class: "text" }, n.address || "–"),
    el("td", Object.assign({ class: n.reachable ? "text" : "error" }, n.error ? { title: n.error } : {}), nodeState(n)),
    el("td", {}, fmtNum(n.replicas || 0)))));
  placementEl.replaceChildren(...(st.shards || []).map(s => el("tr", { "data-shard": s.name },
    el("td", {}, s.name),
    el("td", { class: "text" }, (s.replicas || []).map(r => r.node + (r.error ? " (no answer)" : " @ " + (r.applied || 0))).join(", ")),
    el("td", {}, s.preferredLeader || "–"),
    el("td", { class: s.leader && s.leader === s.preferredLeader ? "" : "warn" }, s.leader || "none"))));
}

// nodeState is a node's state in plain words; the error of a node that
// did not answer is its cell's tooltip.
function nodeState(n) {
  let state = n.reachable ? "up" : "unreachable";
  if (n.draining) state += ", draining";
  if (n.self) state += " (this node)";
  return state;
}

function setStatus(text, error) {
  statusEl.textContent = text;
  statusEl.classList.toggle("error", !!error);
}

// notice says how a button's action went, in the status line, where the
// polls' "updated …" does not replace it for noticeMs.
const noticeMs = 8000;
let noticeUntil = 0;
function notice(text, error) {
  setStatus(text, error);
  noticeUntil = Date.now() + noticeMs;
}

function askToken(why) {
  document.getElementById("login-why").textContent = why;
  loginEl.hidden = false;
  document.getElementById("token").focus();
}

// unreachable names the nodes the last cluster status found unreachable.
let unreachable = [];
let clusterLoading = false;

// poll shows the node's topics as soon as they come, and the cluster's
// status when it does: a node that does not answer holds up neither.
async function poll() {
  clearTimeout(timer);
  try {
    const state = await call(base + "data/state");
    loginEl.hidden = true;
    render(state);
    showUpdated(new Date(state.time));
    if (!clusterLoading) {
      clusterLoading = true;
      loadCluster().then(() => showUpdated(new Date(state.time))).finally(() => { clusterLoading = false; });
    }
  } catch (e) {
    if (e instanceof AuthError) { askToken(e.message); setStatus("needs a token", true); return; }
    setStatus("cannot reach herald: " + e.message, true);
  }
  timer = setTimeout(poll, pollMs);
}

function showUpdated(at) {
  if (Date.now() < noticeUntil) return;
  setStatus("updated " + at.toLocaleTimeString() + (unreachable.length ? "; unreachable: " + unreachable.join(", ") : ""), unreachable.length > 0);
}

loginEl.addEventListener("submit", ev => {
  ev.preventDefault();
  sessionStorage.setItem(tokenKey, document.getElementById("token").value.trim());
  forgetEl.hidden = false;
  poll();
});
forgetEl.addEventListener("click", () => { sessionStorage.removeItem(tokenKey); forgetEl.hidden = true; location.reload(); });
forgetEl.hidden = !sessionStorage.getItem(tokenKey);
poll();
