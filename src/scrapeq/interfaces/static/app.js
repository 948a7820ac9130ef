// The scrapeq dashboard: one page, four views (#/overview, #/domains, #/domain/NAME, #/dead,
// #/events), each polling its own JSON every few seconds. Every text goes in with textContent
// or createTextNode: a URL, a domain or an error message can never inject markup.
"use strict";

const POLL_MS = 3000;
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
let session = {csrf: "", read_only: true, token_holder: false};
let timer = null;
let generation = 0;  // a view's poll that finishes after the user left the view is dropped
const domainsState = {page: 1, per_page: 50, sort: "state", order: "asc", state: "", q: ""};
const deadState = {domain: "", reason: "", open: new Set()};

// --- DOM helpers -------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = String(v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function td(value, cls) { return el("td", {class: cls || ""}, value ?? ""); }

function th(text, cls) { return el("th", {class: cls || ""}, text); }

function table(head, rows, empty) {
  const t = el("table");
  t.append(el("tr", {}, ...head.map((h) => (h instanceof Node ? h : th(h)))));
  if (!rows.length) t.append(el("tr", {}, el("td", {class: "empty", colspan: head.length}, empty || "nothing")));
  for (const r of rows) t.append(r);
  return t;
}

function card(title, ...body) { return el("section", {class: "card"}, el("h2", {}, title), ...body); }

function stateBadge(state) { return el("span", {class: "state " + state}, state.replace("_", "-")); }

function num(n) { return Number(n || 0).toLocaleString("en-US"); }

function human(seconds) {
  const s = Math.round(Math.abs(seconds));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

function ms(value) {
  if (value === null || value === undefined) return "not learned yet";
  return value < 1000 ? Math.round(value) + " ms" : (value / 1000).toFixed(2) + " s";
}

// A domain's politeness: the limit in force, and what an adaptive one has learned (issue 14).
function politeness(info) {
  const learned = info.adaptive;
  const head = ["limit", "how", "between starts", "baseline latency", "current latency"];
  const row = el("tr", {},
    td(learned ? Number(info.limit).toFixed(1) : num(info.concurrency)),
    td(learned ? "adaptive" : "fixed"),
    td(learned ? (info.interval_ms ? ms(info.interval_ms) : "no wait") : (info.delay_ms ? ms(info.delay_ms) : "no wait")),
    td(learned ? ms(info.baseline_ms) : "—"),
    td(learned ? ms(info.latency_ms) : "—"));
  return table(head, [row]);
}

function ago(iso) {
  if (!iso) return "";
  const delta = (Date.now() - Date.parse(iso)) / 1000;
  return delta >= 0 ? human(delta) + " ago" : "in " + human(delta);
}

function link(href, text) { return el("a", {href}, text); }

function domainLink(d) { return link("#/domain/" + encodeURIComponent(d), d); }

// --- talking to the server --------------------------------------------------------------------

async function getJSON(path) {
  const resp = await fetch(path, {credentials: "same-origin"});
  if (!resp.ok) {
    const body = await resp.json().catch(() => ({error: resp.statusText}));
    throw new Error(body.error || "HTTP " + resp.status);
  }
  return resp.json();
}

async function act(question, path, body) {
  if (session.read_only || !confirm(question)) return null;
  const resp = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: {"X-CSRF-Token": session.csrf, "Content-Type": "application/json"},
    body: JSON.stringify(body || {}),
  });
  const answer = await resp.json().catch(() => ({error: resp.statusText}));
  if (!resp.ok) alert(question.replace(/\?$/, "") + ": " + answer.error);
  refresh();
  return resp.ok ? answer : null;
}

function button(text, onclick, danger) {
  return el("button", {class: "act" + (danger ? " danger" : ""), onclick}, text);
}

function breakerButtons(d, state) {
  const path = "api/breaker/" + encodeURIComponent(d) + "/";
  const out = [];
  if (state !== "closed") out.push(button("reset", () => act("Reset the breaker of " + d + "?", path + "reset")));
  if (state === "closed" || state === "half_open") out.push(button("trip", () => act("Trip the breaker of " + d + " now?", path + "trip"), true));
  return out;
}

// --- charts (SVG drawn here: no library, no network) ----------------------------------------------

const COLORS = {done: "#2e9d5b", retried: "#d88a12", throttled: "#2f6fde", released: "#8a94a8", dead: "#d23c3c"};

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

// A chart of per-minute series: lines when `stacked` is false, stacked bars otherwise.
function chart(series, names, stacked, startMs) {
  const W = 800, H = 190, L = 44, R = 10, T = 10, B = 24;
  const n = series[names[0]].length;
  const totals = [...Array(n).keys()].map((i) => (stacked ? names.reduce((a, k) => a + series[k][i], 0) : Math.max(...names.map((k) => series[k][i]))));
  const top = Math.max(1, ...totals);
  const x = (i) => L + (i * (W - L - R)) / Math.max(1, n - 1);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img"});
  for (const f of [0, 0.5, 1]) {
    root.append(svg("line", {x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), stroke: "#e3e6ec"}));
    const label = svg("text", {x: L - 6, y: y(top * f) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7385"});
    label.textContent = num(Math.round(top * f));
    root.append(label);
  }
  for (const i of [0, Math.floor((n - 1) / 2), n - 1]) {
    const t = svg("text", {x: x(i), y: H - 6, "text-anchor": i === 0 ? "start" : i === n - 1 ? "end" : "middle", "font-size": 11, fill: "#6b7385"});
    t.textContent = new Date(startMs + i * 60000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
    root.append(t);
  }
  if (stacked) {
    const w = Math.max(1, (W - L - R) / n - 1);
    for (let i = 0; i < n; i++) {
      let base = 0;
      for (const k of names) {
        const v = series[k][i];
        if (!v) continue;
        root.append(svg("rect", {x: x(i) - w / 2, y: y(base + v), width: w, height: y(base) - y(base + v), fill: COLORS[k]}));
        base += v;
      }
    }
  } else {
    for (const k of names) {
      const points = series[k].map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      root.append(svg("polyline", {points, fill: "none", stroke: COLORS[k], "stroke-width": 2}));
    }
  }
  const legend = el("div", {class: "legend"}, ...names.map((k) => {
    const sw = el("i");
    sw.style.background = COLORS[k];
    return el("span", {}, sw, `${k} ${num(series[k].reduce((a, b) => a + b, 0))}`);
  }));
  return el("div", {class: "chart"}, root, legend);
}

// --- views ------------------------------------------------------------------------------------

async function overview(view) {
  const [s, h] = await Promise.all([getJSON("api/status"), getJSON("api/history?minutes=60")]);
  const c = s.counts;
  const stats = el("div", {class: "stats"}, ...[
    ["ready", c.ready], ["delayed", c.delayed], ["in flight", c.inflight], ["done", c.done],
    ["dead", c.dead, c.dead > 0], ["enqueued", c.enqueued],
  ].map(([l, n, bad]) => el("div", {class: "stat" + (bad ? " bad" : ""), id: "stat-" + l.replace(" ", "")}, el("div", {class: "n"}, num(n)), el("div", {class: "l"}, l))));
  const alarms = el("ul", {class: "alarms", id: "alarms"}, ...s.alarms.map((a) => el("li", {}, a.kind + (a.domain ? " · " + a.domain : "") + ": " + a.message)));
  const maxReady = Math.max(1, ...Object.values(s.lanes).map((l) => l.ready));
  const lanes = table([th("lane", "l"), th("ready", "l"), "delayed", "oldest ready (freshness lag)"],
    Object.entries(s.lanes).map(([name, l]) => {
      const bar = el("span", {class: "bar"});
      bar.style.width = Math.round((120 * l.ready) / maxReady) + "px";
      return el("tr", {}, td(name, "l"), el("td", {class: "l"}, bar, num(l.ready)), td(num(l.delayed)), td(l.ready ? human(l.oldest_ready_age) : "—"));
    }));
  const byState = {closed: 0, half_open: 0, open: 0, retired: 0};
  for (const d of s.domains) byState[d.state] = (byState[d.state] || 0) + 1;
  const states = table(Object.keys(byState).map((k) => th(k.replace("_", "-"))), [el("tr", {}, ...Object.values(byState).map((n) => td(num(n))))]);
  const rank = {retired: 0, open: 1, half_open: 2};
  const worst = s.domains.filter((d) => d.state !== "closed")
    .sort((a, b) => rank[a.state] - rank[b.state] || b.dead - a.dead || a.domain.localeCompare(b.domain)).slice(0, 8);
  const tripped = table([th("domain", "l"), th("state", "l"), "ready", "dead", "open"],
    worst.map((d) => el("tr", {}, el("td", {class: "l"}, domainLink(d.domain)), el("td", {class: "l"}, stateBadge(d.state)), td(num(d.ready)), td(num(d.dead)), td(d.open_until ? ago(d.open_until) : ""))), "every breaker is closed");
  const rv = s.revisits ? [el("p", {id: "revisits"}, `revisits: ${num(s.revisits.pages)} pages tracked, ${Number(s.revisits.load).toFixed(1)} visits/h scheduled, estimated freshness ${freshness(s.revisits.freshness)}`)] : [];
  view.replaceChildren(
    el("h1", {}, "Overview"), stats, alarms, ...rv,
    el("div", {class: "grid"},
      card("Throughput, jobs per minute (last hour)", chart(h.outcomes, ["done"], false, h.start_ms)),
      card("Outcomes per minute (last hour)", chart(h.outcomes, ["retried", "throttled", "released", "dead"], true, h.start_ms))),
    el("div", {class: "grid"}, card("Lanes", lanes), card("Breakers", states, el("p"), tripped)));
}

function sortHeader(label, column) {
  const cls = "sortable" + (column === "domain" || column === "state" ? " l" : "") + (domainsState.sort === column ? " sorted" + (domainsState.order === "desc" ? " desc" : "") : "");
  return el("th", {class: cls, onclick: () => {
    if (domainsState.sort === column) domainsState.order = domainsState.order === "asc" ? "desc" : "asc";
    else { domainsState.sort = column; domainsState.order = column === "domain" || column === "state" ? "asc" : "desc"; }
    refresh();
  }}, label);
}

function domainsToolbar() {
  const q = el("input", {type: "search", placeholder: "filter by name", value: domainsState.q, id: "domain-filter"});
  q.addEventListener("change", () => { domainsState.q = q.value; domainsState.page = 1; refresh(); });
  const st = el("select", {id: "state-filter"}, ...["", "closed", "half_open", "open", "retired"].map((s) => {
    const o = el("option", {value: s}, s ? s.replace("_", "-") : "any state");
    if (s === domainsState.state) o.selected = true;
    return o;
  }));
  st.addEventListener("change", () => { domainsState.state = st.value; domainsState.page = 1; refresh(); });
  return el("div", {class: "toolbar"}, q, st);
}

// The breaker window's failure rate: its failures among the last outcomes it recorded (kept
// while it is open: what tripped it); a 404 is not in it. Blank when it recorded none.
function failureRate(d) {
  if (!d.window_calls) return el("td", {title: "no outcome in the breaker's window"}, "–");
  const text = (100 * d.failure_rate).toFixed(1) + " %";
  return el("td", {title: `${d.window_failures} of the last ${d.window_calls} calls failed`}, text);
}

// Revisits (revisit = on): a domain's revisit load, visits an hour its pages are scheduled at,
// and the estimated share of its pages whose stored copy is fresh (weighted).
function revisitLoad(d) { return d.revisit_pages ? Number(d.revisit_load).toFixed(1) : "–"; }

function freshness(f) { return f === null || f === undefined ? "–" : (100 * f).toFixed(1) + " %"; }

// The revisit budget the domain's scheduled load is measured against (visits a domain-hour),
// and the share of it the scheduled revisits use.
function budgetUse(d) {
  if (!d.revisit_pages || !d.revisit_budget) return "–";
  const budget = Number(d.revisit_budget);
  const shown = budget >= 10 ? budget.toFixed(0) : String(Number(budget.toPrecision(2)));
  return (100 * Number(d.revisit_load) / budget).toFixed(0) + " % of " + shown;
}

function revisitsCard(d) {
  if (!d.revisit_pages && !d.budget) return [];
  const row = el("tr", {}, td(num(d.revisit_pages)), td(revisitLoad(d)), td(budgetUse(d)), td(freshness(d.freshness)), td(d.budget ?? "–", "l"));
  return [card("Revisits and budgets", table(["pages tracked", "revisits/h", "of the budget/h", "freshness", th("budget stopped", "l")], [row]))];
}

async function domains(view) {
  const p = new URLSearchParams({page: domainsState.page, per_page: domainsState.per_page, sort: domainsState.sort, order: domainsState.order});
  if (domainsState.state) p.set("state", domainsState.state);
  if (domainsState.q) p.set("q", domainsState.q);
  const doc = await getJSON("api/domains?" + p);
  const hasLimit = doc.items.some((d) => d.adaptive_limit !== null && d.adaptive_limit !== undefined);
  const hasRevisits = doc.items.some((d) => d.revisit_pages);
  const hasBudget = doc.items.some((d) => d.budget);
  const head = [sortHeader("domain", "domain"), sortHeader("state", "state"), sortHeader("ready", "ready"), sortHeader("in flight", "inflight"), sortHeader("done", "done"), sortHeader("dead", "dead"), sortHeader("failure rate", "failure_rate"), sortHeader("open until", "open_until")];
  if (hasLimit) head.push(th("limit"));
  if (hasRevisits) head.push(sortHeader("revisits/h", "revisit_load"), sortHeader("freshness", "freshness"));
  if (hasBudget) head.push(th("budget", "l"));
  head.push(th(""));
  const rows = doc.items.map((d) => {
    const cells = [el("td", {class: "l"}, domainLink(d.domain)), el("td", {class: "l"}, stateBadge(d.state)), td(num(d.ready)), td(num(d.inflight)), td(num(d.done)), td(num(d.dead)), failureRate(d), td(d.open_for !== null ? "in " + human(d.open_for) : "")];
    if (hasLimit) cells.push(td(d.adaptive_limit ?? ""));
    if (hasRevisits) cells.push(td(revisitLoad(d)), td(freshness(d.freshness)));
    if (hasBudget) cells.push(td(d.budget ?? "", "l"));
    cells.push(el("td", {}, ...breakerButtons(d.domain, d.state)));
    return el("tr", {"data-domain": d.domain, "data-state": d.state}, ...cells);
  });
  const last = Math.max(1, Math.ceil(doc.total / doc.per_page));
  const first = doc.total ? (doc.page - 1) * doc.per_page + 1 : 0;
  const pager = el("div", {class: "pager"},
    el("button", {onclick: () => { domainsState.page = Math.max(1, domainsState.page - 1); refresh(); }}, "‹ prev"),
    el("span", {class: "muted"}, `${num(first)}–${num(Math.min(doc.page * doc.per_page, doc.total))} of ${num(doc.total)}`),
    el("button", {onclick: () => { domainsState.page = Math.min(last, domainsState.page + 1); refresh(); }}, "next ›"));
  const old = $("domain-filter");
  const toolbar = old && document.activeElement === old ? old.parentNode : domainsToolbar();
  view.replaceChildren(el("h1", {}, "Domains"), toolbar, el("div", {class: "card"}, table(head, rows, "no domain matches"), pager));
}

async function domainView(view, name) {
  const doc = await getJSON("api/domain/" + encodeURIComponent(name));
  const d = doc.domain;
  const facts = table(["state", "ready", "delayed", "in flight", "done", "dead", "failure rate", "trips", "open until", "concurrency", "delay", ...(d.fetcher ? ["fetcher"] : [])],
    [el("tr", {}, el("td", {}, stateBadge(d.state)), td(num(d.ready)), td(num(d.delayed)), td(num(d.inflight)), td(num(d.done)), td(num(d.dead)), failureRate(d), td(d.trips), td(d.open_for !== null ? "in " + human(d.open_for) : ""), td(d.adaptive_limit ?? d.concurrency ?? ""), td(d.delay_ms ? d.delay_ms / 1000 + " s" : ""), ...(d.fetcher ? [td(d.fetcher, "l")] : []))]);
  const errors = table([th("when", "l"), th("kind", "l"), th("message", "l"), th("job", "l")],
    doc.errors.map((e) => el("tr", {}, td(ago(new Date(e.at).toISOString()), "l"), td(e.kind, "l"), td(e.message, "wrap"), td(e.id, "l"))), "no recent errors");
  const events = table([th("when", "l"), th("event", "l"), th("message", "l")],
    doc.events.map((e) => el("tr", {}, td(ago(e.at), "l"), td(e.kind, "l"), td(e.message, "wrap"))), "no breaker events");
  view.replaceChildren(
    el("h1", {}, d.domain, " ", ...breakerButtons(d.domain, d.state)),
    card("Figures", facts),
    card("Politeness", politeness(doc.info)),
    ...revisitsCard(d),
    ...(doc.exits ? [card("Exits (tier " + (doc.exits.tier ?? "-") + ")", domainExits(doc.exits))] : []),
    el("div", {class: "grid"}, card("Recent errors (failures and dead letters)", errors), card("Breaker history", events)),
    el("p", {}, link("#/dead?domain=" + encodeURIComponent(d.domain), "its dead letters →")));
}

function domainExits(x) {
  const tiers = table([th("tier", "l"), "requests", "bytes", th("benched exits", "l")],
    Object.entries(x.per_tier).map(([t, c]) => el("tr", {}, td(t, "l"), td(num(c.requests)), td(num(c.bytes)),
      td(x.benched.filter((b) => b.tier === t).map((b) => b.name + " (until " + new Date(b.until_ms).toLocaleTimeString() + ", ban " + b.bans_in_a_row + ")").join(", ") || "-", "wrap"))));
  return tiers;
}

async function proxies(view) {
  const doc = await getJSON("api/exits");
  const rows = doc.exits.map((e) => el("tr", {},
    td(e.name, "l"), td(e.tier, "l"), el("td", {}, stateBadge(e.state)), td(num(e.requests)), td(num(e.ok)), td(num(e.bans)),
    td(num(e.failures)), td(num(e.timeouts)), td(e.success_rate === null ? "" : (100 * e.success_rate).toFixed(1) + "%"),
    td(e.latency_ms === null ? "" : e.latency_ms + " ms"), td(num(e.bytes)), td(e.open_until ? "in " + ago(e.open_until) : "")));
  view.replaceChildren(el("h1", {}, "Proxies"), el("div", {class: "card"},
    table([th("exit", "l"), th("tier", "l"), "state", "requests", "ok", "bans", "failures", "timeouts", "success", "latency", "bytes", "rests"], rows, "no proxies configured (settings proxy, proxy_file)"),
    el("p", {class: "muted"}, "tiers, cheapest first: " + (doc.tiers.join(", ") || "-"))));
}

function deadToolbar() {
  const domain = el("input", {type: "search", placeholder: "domain", value: deadState.domain, id: "dead-domain"});
  const reason = el("input", {type: "search", placeholder: "reason (http_404…)", value: deadState.reason, id: "dead-reason"});
  for (const [input, key] of [[domain, "domain"], [reason, "reason"]]) input.addEventListener("change", () => { deadState[key] = input.value.trim(); refresh(); });
  const bar = el("div", {class: "toolbar"}, domain, reason);
  bar.append(button("replay all", () => act("Replay every dead letter?", "api/dead/replay", {all: true})));
  bar.append(button("purge all", () => act("Purge every dead letter for good?", "api/dead/purge", {all: true}), true));
  return bar;
}

async function dead(view) {
  const p = new URLSearchParams({limit: 200});
  if (deadState.domain) p.set("domain", deadState.domain);
  if (deadState.reason) p.set("reason", deadState.reason);
  const jobs = await getJSON("api/dead?" + p);
  const rows = [];
  for (const j of jobs) {
    const last = j.last_error ? j.last_error.kind + ": " + j.last_error.message : "";
    rows.push(el("tr", {"data-id": j.id},
      td(j.id, "l"), el("td", {class: "l"}, domainLink(j.domain)), td(j.lane, "l"), td(j.dead_reason || "", "l"), td(j.attempts + "/" + j.max_attempts), td(ago(j.died_at)), td(last, "wrap"), td(j.url, "wrap"),
      el("td", {},
        el("button", {onclick: () => { deadState.open.has(j.id) ? deadState.open.delete(j.id) : deadState.open.add(j.id); refresh(); }}, deadState.open.has(j.id) ? "hide" : "errors"), " ",
        button("replay", () => act("Replay dead letter " + j.id + "?", "api/dead/replay", {ids: [j.id]})))));
    if (deadState.open.has(j.id)) {
      const history = table([th("when", "l"), th("kind", "l"), th("message", "l")], j.errors.slice().reverse().map((e) => el("tr", {}, td(new Date(e.at).toISOString(), "l"), td(e.kind, "l"), td(e.message, "wrap"))), "no error history");
      const payload = j.payload_hidden ? el("p", {class: "muted"}, "payload hidden: sign in with the token to see it") : j.payload !== null ? el("pre", {}, JSON.stringify(j.payload, null, 2)) : "";
      rows.push(el("tr", {class: "details"}, el("td", {colspan: 9}, history, payload)));
    }
  }
  const actions = [];
  if (deadState.domain) {
    actions.push(button("replay this domain's", () => act("Replay every dead letter of " + deadState.domain + "?", "api/dead/replay", {domain: deadState.domain})));
    actions.push(button("purge this domain's", () => act("Purge every dead letter of " + deadState.domain + " for good?", "api/dead/purge", {domain: deadState.domain}), true));
  }
  const old = document.activeElement;
  const toolbar = old && (old.id === "dead-domain" || old.id === "dead-reason") ? old.parentNode : deadToolbar();
  view.replaceChildren(el("h1", {}, "Dead letters"), toolbar, el("div", {class: "toolbar"}, ...actions),
    el("div", {class: "card"}, table([th("id", "l"), th("domain", "l"), th("lane", "l"), th("reason", "l"), "attempts", "died", th("last error", "l"), th("url", "l"), ""], rows, "no dead letters"), el("p", {class: "muted"}, `${jobs.length} shown, newest first`)));
}

async function events(view) {
  const list = await getJSON("api/events?count=200");
  view.replaceChildren(el("h1", {}, "Events"), el("div", {class: "card"}, table([th("when", "l"), th("event", "l"), th("domain", "l"), th("message", "l")],
    list.map((e) => el("tr", {}, td(ago(e.at), "l"), td(e.kind, "l"), el("td", {class: "l"}, e.domain ? domainLink(e.domain) : ""), td(e.message, "wrap"))), "no events yet")));
}

// --- routing and polling ----------------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "overview";
  const [path, query] = hash.split("?");
  const [name, arg] = path.split("/");
  return {name, arg: arg ? decodeURIComponent(arg) : "", params: new URLSearchParams(query || "")};
}

async function refresh() {
  const mine = ++generation;
  clearTimeout(timer);
  const r = route();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === (r.name === "domain" ? "domains" : r.name));
  const view = el("main", {id: "view"});
  try {
    session = await getJSON("api/session");
    if (r.name === "domains") await domains(view);
    else if (r.name === "domain") await domainView(view, r.arg);
    else if (r.name === "dead") await dead(view);
    else if (r.name === "proxies") await proxies(view);
    else if (r.name === "events") await events(view);
    else await overview(view);
    if (mine !== generation) return;
    document.body.classList.toggle("readonly", session.read_only);
    $("view").replaceWith(view);
    showPause(session);
    $("conn").textContent = "updated " + new Date().toLocaleTimeString() + (session.read_only ? " · read-only" : "");
  } catch (err) {
    if (mine !== generation) return;
    $("conn").textContent = "disconnected (" + err.message + ")";
  }
  timer = setTimeout(refresh, POLL_MS);
}

function showPause(s) {
  $("queue").textContent = "queue " + s.queue;
  const banner = $("pause");
  banner.hidden = !s.paused_until;
  banner.textContent = s.paused_until ? "Dispatch paused by the global guard until " + new Date(s.paused_until).toLocaleTimeString() + " (" + ago(s.paused_until) + ")" : "";
}

window.addEventListener("hashchange", () => {
  const r = route();
  if (r.name === "dead") { deadState.domain = r.params.get("domain") || ""; deadState.reason = r.params.get("reason") || ""; }
  refresh();
});

document.addEventListener("DOMContentLoaded", () => {
  const r = route();
  if (r.name === "dead") deadState.domain = r.params.get("domain") || "";
  refresh();
});
