// The tplog thread browser: the thread list (#/) and a thread as a conversation (#/thread/ID),
// read from the server's JSON endpoints and kept current by the thread's SSE tail.
// Stored text only ever enters the page through textContent and attributes, never as HTML.
"use strict";

const app = document.getElementById("app");
const where = document.getElementById("where");
const liveMark = document.getElementById("live");
let tail = null; // the AbortController of the open thread's event tail
let nav = 0; // bumped on each navigation: a view still loading for an older one drops its result

// h("div", {class: "x"}, child, "text", [more]) -> an element; strings become text nodes
function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  const add = (c) => {
    if (c === null || c === undefined || c === false) return;
    if (Array.isArray(c)) c.forEach(add);
    else node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  };
  children.forEach(add);
  return node;
}

async function api(path) {
  const resp = await fetch(path, { headers: { accept: "application/json" } });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const err = body && body.error ? body.error : { status: resp.status, message: resp.statusText };
    throw new Error(`${path}: ${err.status} ${err.message}`);
  }
  return body;
}

const threadHref = (id) => "#/thread/" + encodeURIComponent(id);
const threadLink = (id, label) => h("a", { href: threadHref(id), class: "tid" }, label || id);
const isoNs = (ns) => (ns ? new Date(Math.floor(ns / 1e6)).toISOString().replace(".000Z", "Z") : "");
const pretty = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));
// Only web and inline URLs become links: no javascript: or other schemes. Only inline (data:)
// media are shown: fetching a stored web address would tell its owner who reads the thread.
const safeUrl = (u) => (typeof u === "string" && /^(https?:|data:)/i.test(u) ? u : null);
const inlineUrl = (u) => (typeof u === "string" && /^data:/i.test(u) ? u : null);
const label = (text) => h("span", { class: "label" }, text);

function showError(err) {
  app.replaceChildren(h("p", { class: "error" }, String(err.message || err)));
}

// ------------------------------------------------------------------ thread list

async function showList(me) {
  where.textContent = "threads";
  const filter = h("input", { type: "search", id: "filter", placeholder: "filter by thread id or title" });
  const rows = h("tbody");
  const more = h("button", { id: "more", hidden: true }, "Load more");
  let cursor = null;

  const matches = (tr) => {
    const q = filter.value.trim().toLowerCase();
    return !q || tr.dataset.search.includes(q);
  };
  const applyFilter = () => rows.querySelectorAll("tr").forEach((tr) => (tr.hidden = !matches(tr)));

  async function load() {
    more.disabled = true;
    const q = "/threads?limit=50" + (cursor ? "&after=" + encodeURIComponent(cursor) : "");
    const page = await api(q);
    if (me !== nav) return;
    for (const t of page.threads) {
      const title = h("span", { class: "title" });
      const tr = h("tr", { "data-thread": t.thread_id },
        h("td", {}, threadLink(t.thread_id), " ", title),
        h("td", { class: "time" }, isoNs(t.updated_ns)),
        h("td", { class: "num" }, `${t.user_turns} / ${t.agent_turns}`),
        h("td", {}, t.status === "deleted" ? h("span", { class: "badge deleted" }, "deleted") : null,
          t.open_turn_agent ? h("span", { class: "badge live" }, `turn open: ${t.open_turn_agent}`) : null));
      tr.dataset.search = t.thread_id.toLowerCase();
      rows.appendChild(tr);
      if (t.status !== "deleted") loadTitle(t.thread_id, title, tr);
    }
    cursor = page.next_cursor;
    more.hidden = !cursor;
    more.disabled = false;
    applyFilter();
  }

  // Heads carry no title; each row asks for its thread's, and the filter sees it once known.
  async function loadTitle(id, span, tr) {
    try {
      const th = await api("/threads/" + encodeURIComponent(id));
      if (th.title) {
        span.textContent = th.title;
        tr.dataset.search = (id + " " + th.title).toLowerCase();
        tr.hidden = !matches(tr);
      }
    } catch (e) { /* the row still links to the thread */ }
  }

  filter.addEventListener("input", applyFilter);
  more.addEventListener("click", () => load().catch(showError));
  app.replaceChildren(
    h("h1", {}, "Threads"), filter,
    h("table", { class: "threads" },
      h("thead", {}, h("tr", {}, h("th", {}, "thread"), h("th", {}, "updated (UTC)"),
        h("th", {}, "user / agent turns"), h("th", {}, ""))),
      rows),
    more);
  await load();
  if (!rows.children.length) app.appendChild(h("p", { class: "muted" }, "No threads yet."));
}

// ------------------------------------------------------------------ one thread

async function fetchThread(id) {
  const enc = "/threads/" + encodeURIComponent(id);
  const [thread, turns, pending, interrupts, links, incoming, children] = await Promise.all([
    api(enc), api(enc + "/turns"), api(enc + "/pending"), api(enc + "/interrupts"),
    api(enc + "/links"), api(enc + "/links?incoming=1"), api(enc + "/children"),
  ]);
  return { thread, turns, pending, interrupts, links, incoming, children };
}

function content(c) {
  // user content: a string, a URL (image/audio/video/document), inline binary, or an extension
  if (typeof c === "string") return h("div", { class: "text" }, c);
  const inline = inlineUrl(c.url);
  if (c.kind === "image-url" && inline) return h("img", { src: inline, alt: c.identifier || "image" });
  if (c.kind === "audio-url" && inline) return h("audio", { src: inline, controls: true });
  if (c.kind === "video-url" && inline) return h("video", { src: inline, controls: true });
  const kinds = { "image-url": "image", "audio-url": "audio", "video-url": "video", "document-url": "document" };
  if (kinds[c.kind]) {
    const url = safeUrl(c.url);
    return h("div", { class: "file" }, label(kinds[c.kind]),
      url ? h("a", { href: url, rel: "noreferrer noopener", target: "_blank", class: "remote" }, c.url) : c.url);
  }
  if (c.kind === "binary") return binary(c);
  return h("pre", { class: "json" }, pretty(c));
}

function binary(b) {
  const desc = `${b.identifier || "file"} (${b.media_type}, ${Math.round((b.data || "").length * 0.75)} bytes)`;
  if (/^image\//.test(b.media_type || "")) {
    return h("figure", {}, h("img", { src: `data:${b.media_type};base64,${b.data}`, alt: desc }),
      h("figcaption", {}, desc));
  }
  return h("div", { class: "file" }, label("file"), desc);
}

function part(p, ctx) {
  switch (p.part_kind) {
    case "user-prompt":
      return Array.isArray(p.content) ? p.content.map(content) : content(p.content);
    case "text":
      return h("div", { class: "text" }, p.content);
    case "thinking":
      return h("details", { class: "thinking" }, h("summary", {}, "Thinking"),
        h("div", { class: "text" }, p.content || "(redacted)"));
    case "tool-call": {
      const pend = ctx.pending.get(p.tool_call_id);
      return h("div", { class: "tool-call" + (pend ? " pending" : ""), "data-call": p.tool_call_id },
        h("div", { class: "head" }, label("tool call"), h("b", {}, p.tool_name),
          h("code", { class: "id" }, p.tool_call_id),
          pend ? h("span", { class: "badge pending" }, pendingLabel(pend)) : null),
        p.args === undefined ? null : h("pre", { class: "json" }, pretty(p.args)));
    }
    case "tool-return":
      return h("div", { class: "tool-return" + (p.status && p.status !== "success" ? " failed" : "") },
        h("div", { class: "head" }, label("returned"), h("b", {}, p.tool_name),
          h("code", { class: "id" }, p.tool_call_id),
          p.status ? h("span", { class: "badge" }, p.status) : null),
        p.content === undefined ? null : h("pre", { class: "json" }, pretty(p.content)),
        p.content_ref ? h("div", { class: "file" }, label("file"),
          safeUrl(p.content_ref.uri) ? h("a", { href: p.content_ref.uri, rel: "noreferrer" }, p.content_ref.uri)
            : p.content_ref.uri, p.content_ref.media_type ? ` (${p.content_ref.media_type})` : "") : null);
    case "retry-prompt":
      return h("div", { class: "retry" }, label("retry"), "asked to retry", p.tool_name ? ` ${p.tool_name}` : "", ": ",
        h("pre", { class: "json" }, pretty(p.content)));
    case "file":
      return binary(p.content);
    default:
      return h("pre", { class: "json" }, pretty(p));
  }
}

function pendingLabel(pc) {
  if (pc.state === "abandoned") return "abandoned";
  if (pc.kind === "approval") return "awaiting approval";
  if (pc.kind === "external") return "awaiting client result";
  return pc.state === "executing" ? "executing" : "pending";
}

function turnView(turn, index, ctx, inProgress) {
  if (turn.turn_type === "user") {
    return h("section", { class: "turn user", "data-turn": index },
      h("div", { class: "who" }, "User", h("span", { class: "time" }, turn.submitted_at)),
      turn.parts.map((p) => part(p, ctx)));
  }
  const body = [];
  for (const msg of turn.messages || []) {
    if (msg.message_type === "system") {
      body.push(h("div", { class: "system" }, label("system"), msg.event_type,
        msg.event_data === undefined ? null : h("pre", { class: "json" }, pretty(msg.event_data))));
    } else {
      body.push(h("div", { class: "msg " + msg.message_type }, msg.parts.map((p) => part(p, ctx))));
    }
  }
  const facts = ctx.interrupts.filter((f) => f.turn === index && f.source !== "turn");
  for (const f of facts) {
    body.push(h("div", { class: "interrupted" }, `${f.source} aborted: ${f.reason}`,
      f.tool_call_id ? ` (${f.tool_call_id})` : ""));
  }
  const intr = turn.interruption;
  if (intr) {
    body.push(h("div", { class: "interrupted", role: "alert" },
      `Interrupted here: ${intr.reason}`, h("span", { class: "time" }, intr.interrupted_at)));
  }
  const status = inProgress ? "in progress" : turn.completion_status;
  return h("section", { class: "turn agent" + (intr ? " was-interrupted" : "") + (inProgress ? " open" : ""),
    "data-turn": index },
  h("div", { class: "who" }, `Agent ${turn.agent_id}`,
    status ? h("span", { class: "badge" + (inProgress ? " live" : "") }, status) : null,
    h("span", { class: "time" }, turn.started_at)),
  body);
}

function linkTree(d) {
  const parents = d.links.links.filter((l) => l.relation === "spawned_from");
  const others = d.links.links.filter((l) => l.relation !== "spawned_from");
  const item = (id, rel) => h("li", {}, threadLink(id), rel ? h("span", { class: "rel" }, rel) : null);
  const group = (title, cls, items) => (items.length
    ? h("div", { class: "links " + cls }, h("h3", {}, title), h("ul", {}, items)) : null);
  return h("nav", { class: "tree", "aria-label": "linked threads" },
    group("Parent", "parent", parents.map((l) => item(l.thread_id, null))),
    group("Spawned children", "children", d.children.children.map((id) => item(id, null))),
    group("Links to", "outgoing", others.map((l) => item(l.thread_id, l.relation))),
    group("Linked from", "incoming", d.incoming.incoming
      .filter((l) => !(l.relation === "spawned_from" && d.children.children.includes(l.thread_id)))
      .map((l) => item(l.thread_id, l.relation))));
}

function renderThread(id, d) {
  const th = d.thread;
  const ctx = {
    pending: new Map([...d.pending.pending, ...d.pending.abandoned].map((pc) => [pc.tool_call_id, pc])),
    interrupts: d.interrupts.facts,
  };
  const waiting = d.pending.pending;
  const turns = th.turns.map((t, i) => turnView(t, i, ctx, false));
  if (d.turns.in_progress) turns.push(turnView(d.turns.in_progress, th.turns.length, ctx, true));
  where.textContent = th.title || id;
  app.replaceChildren(h("div", {},
    h("h1", {}, th.title || "Untitled thread"),
    h("p", { class: "meta" }, h("code", { class: "tid" }, id),
      ` · created ${th.created_at} · updated ${th.updated_at} · version ${d.turns.version}`),
    waiting.length ? h("div", { class: "pending-summary", role: "status" },
      `${waiting.length} tool call${waiting.length > 1 ? "s" : ""} waiting: `,
      waiting.map((pc, i) => [i ? ", " : "", h("b", {}, pc.tool_name), ` (${pendingLabel(pc)})`])) : null,
    d.interrupts.interrupted ? h("div", { class: "interrupted-summary" },
      `The last agent turn was interrupted (${d.interrupts.last.reason})`) : null,
    h("div", { class: "layout" },
      h("div", { class: "conversation" }, turns.length ? turns : h("p", { class: "muted" }, "No turns yet.")),
      linkTree(d))));
}

async function showThread(id, me) {
  where.textContent = id;
  let d = await fetchThread(id);
  if (me !== nav) return;
  renderThread(id, d);
  // Follow the thread: any new event re-reads and re-renders it (coalesced while one is in flight).
  const ctl = new AbortController();
  tail = ctl;
  let busy = false;
  let again = false;
  const refresh = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do {
        again = false;
        d = await fetchThread(id);
        if (ctl.signal.aborted) return;
        const y = window.scrollY;
        renderThread(id, d);
        window.scrollTo(0, y);
      } while (again);
    } catch (e) { /* a failed refresh keeps the last view; the next event retries */ } finally { busy = false; }
  };
  follow(id, d.turns.version, ctl, refresh);
}

// The SSE tail read with fetch (it names each event by its type, so EventSource would need
// one listener per type). Reconnects from the last seq seen until the view changes.
async function follow(id, after, ctl, onEvent) {
  let last = after;
  while (!ctl.signal.aborted) {
    try {
      const resp = await fetch(`/threads/${encodeURIComponent(id)}/events?after=${last}`, { signal: ctl.signal });
      if (!resp.ok) return;
      liveMark.hidden = false;
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          const idLine = frame.split("\n").find((l) => l.startsWith("id:"));
          if (idLine) {
            last = Number(idLine.slice(3).trim());
            onEvent();
          }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    liveMark.hidden = true;
    await new Promise((r) => setTimeout(r, 2000));
  }
}

// ------------------------------------------------------------------ routing

function route() {
  if (tail) tail.abort();
  tail = null;
  liveMark.hidden = true;
  const m = location.hash.match(/^#\/thread\/(.+)$/);
  const me = ++nav;
  const shown = m ? showThread(decodeURIComponent(m[1]), me) : showList(me);
  shown.catch((e) => me === nav && showError(e));
  window.scrollTo(0, 0);
}

window.addEventListener("hashchange", route);
route();
