// One thread as a conversation (#/thread/ID[?turn=N&seq=S&q=…]): agents by name and model,
// usage per turn and in all, long tool output folded, a fork's fork point, spawn messages as
// links, the family tree beside it; kept current by the thread's SSE tail.
import { familyTree } from "./family.js";
import {
  activityBadge, api, binary, enc, h, highlight, inlineUrl, label, pretty, queryWords, safeUrl, threadLink,
} from "./dom.js";

const SPAWN = new Set(["data-tp-thread_spawn", "thread.spawn"]);
const LONG_CHARS = 800;
const LONG_LINES = 16;

async function fetchThread(id) {
  const p = "/threads/" + enc(id);
  const [thread, turns, pending, interrupts, family] = await Promise.all([
    api(p), api(p + "/turns"), api(p + "/pending"), api(p + "/interrupts"), api(p + "/family"),
  ]);
  return { thread, turns, pending, interrupts, family };
}

// A JSON or text block; a long one is folded (its first line shown) until clicked open.
function block(v) {
  const text = pretty(v);
  const lines = text.split("\n").length;
  const pre = h("pre", { class: "json" }, text);
  if (text.length <= LONG_CHARS && lines <= LONG_LINES) return pre;
  const first = text.split("\n", 1)[0].slice(0, 80);
  return h("details", { class: "long" },
    h("summary", {}, h("span", { class: "preview" }, first),
      ` … show all ${lines} lines (${text.length} characters)`),
    pre);
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
        p.args === undefined ? null : block(p.args));
    }
    case "tool-return":
      return h("div", { class: "tool-return" + (p.status && p.status !== "success" ? " failed" : "") },
        h("div", { class: "head" }, label("returned"), h("b", {}, p.tool_name),
          h("code", { class: "id" }, p.tool_call_id),
          p.status ? h("span", { class: "badge" }, p.status) : null),
        p.content === undefined ? null : block(p.content),
        p.content_ref ? h("div", { class: "file" }, label("file"),
          safeUrl(p.content_ref.uri) ? h("a", { href: p.content_ref.uri, rel: "noreferrer" }, p.content_ref.uri)
            : p.content_ref.uri, p.content_ref.media_type ? ` (${p.content_ref.media_type})` : "") : null);
    case "retry-prompt":
      return h("div", { class: "retry" }, label("retry"), "asked to retry", p.tool_name ? ` ${p.tool_name}` : "", ": ",
        block(p.content));
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

function systemMessage(msg, ctx) {
  const data = msg.event_data;
  const spawned = SPAWN.has(msg.event_type) && data && typeof data === "object"
    ? data.spawned_thread_id || data.thread_id : null;
  if (typeof spawned === "string") {
    return h("div", { class: "system spawn" }, label("spawned"), "Started thread ",
      threadLink(spawned, ctx.nameOf(spawned), "tid spawn-link"),
      msg.source_agent ? ` (by ${agentLabel(ctx, msg.source_agent)})` : "");
  }
  return h("div", { class: "system" }, label("system"), msg.event_type,
    data === undefined ? null : block(data));
}

// Token usage: the turn's total when recorded, else the sum of its messages'
const TOKENS = ["input_tokens", "output_tokens", "thinking_tokens", "total_tokens"];
function turnUsage(turn) {
  if (turn.total_usage) return turn.total_usage;
  const sum = {};
  for (const msg of turn.messages || []) {
    for (const k of TOKENS) if (msg.usage && typeof msg.usage[k] === "number") sum[k] = (sum[k] || 0) + msg.usage[k];
  }
  return Object.keys(sum).length ? sum : null;
}
function usageText(u) {
  const n = (k) => (typeof u[k] === "number" ? u[k].toLocaleString("en") : null);
  const bits = [n("input_tokens") && `${n("input_tokens")} in`, n("output_tokens") && `${n("output_tokens")} out`,
    n("thinking_tokens") && `${n("thinking_tokens")} thinking`].filter(Boolean);
  if (n("total_tokens")) bits.push(`${n("total_tokens")} total`);
  return bits.join(" · ");
}

function agentLabel(ctx, key) {
  const a = ctx.agents[key] || Object.values(ctx.agents).find((c) => c.agent_id === key);
  return a ? a.agent_name : key;
}

function turnView(turn, index, ctx, inProgress) {
  if (turn.turn_type === "user") {
    return h("section", { class: "turn user", "data-turn": index },
      h("div", { class: "who" }, "User", h("span", { class: "time" }, turn.submitted_at)),
      turn.parts.map((p) => part(p, ctx)));
  }
  const body = [];
  let model = null;
  for (const msg of turn.messages || []) {
    if (msg.message_type === "system") body.push(systemMessage(msg, ctx));
    else body.push(h("div", { class: "msg " + msg.message_type }, msg.parts.map((p) => part(p, ctx))));
    if (msg.model_name) model = msg.model_name;
  }
  for (const f of ctx.interrupts.filter((x) => x.turn === index && x.source !== "turn")) {
    body.push(h("div", { class: "interrupted" }, `${f.source} aborted: ${f.reason}`,
      f.tool_call_id ? ` (${f.tool_call_id})` : ""));
  }
  const intr = turn.interruption;
  if (intr) {
    body.push(h("div", { class: "interrupted", role: "alert" },
      `Interrupted here: ${intr.reason}`, h("span", { class: "time" }, intr.interrupted_at)));
  }
  const usage = turnUsage(turn);
  const status = inProgress ? "in progress" : turn.completion_status;
  return h("section", { class: "turn agent" + (intr ? " was-interrupted" : "") + (inProgress ? " open" : ""),
    "data-turn": index },
  h("div", { class: "who" }, h("span", { class: "agent-name", title: `agent id ${turn.agent_id}` },
    agentLabel(ctx, turn.agent_id)),
  model ? h("span", { class: "model" }, model) : null,
  status ? h("span", { class: "badge" + (inProgress ? " live" : "") }, status) : null,
  h("span", { class: "time" }, turn.started_at)),
  body,
  usage ? h("div", { class: "usage" }, "usage: " + usageText(usage)) : null);
}

// A fork's parent, fork point and reason (the family route reads them from its spawned_from link)
function forkOf(me) {
  const f = me && me.fork;
  if (!f) return null;
  const m = /^turn_(\d+)$/.exec(f.branch_point || "");
  return { parent: f.of, seq: f.seq, reason: f.reason, turns: m ? Number(m[1]) : 0 };
}

function agentsLine(th) {
  const list = Object.values(th.agents || {});
  if (!list.length) return null;
  return h("p", { class: "agents-line" }, label("agents"), list.map((a, i) => [i ? ", " : "",
    h("b", { title: `agent id ${a.agent_id}` }, a.agent_name), a.model_name ? ` (${a.model_name})` : ""]));
}

function renderThread(view, id, d) {
  const th = d.thread;
  const ctx = {
    pending: new Map([...d.pending.pending, ...d.pending.abandoned].map((pc) => [pc.tool_call_id, pc])),
    interrupts: d.interrupts.facts,
    agents: th.agents || {},
    // a thread of the family by its title (what the family route carries), else its id
    nameOf: (tid) => (d.family.root && findNode(d.family.root, tid) || {}).title || tid,
  };
  const waiting = d.pending.pending;
  const turns = th.turns.map((t, i) => turnView(t, i, ctx, false));
  if (d.turns.in_progress) turns.push(turnView(d.turns.in_progress, th.turns.length, ctx, true));
  const me = findNode(d.family.root, d.family.thread_id);
  const fork = forkOf(me);
  if (fork) {
    const at = Math.min(fork.turns, turns.length);
    turns.splice(at, 0, h("div", { class: "fork-point", role: "note", "data-seq": fork.seq },
      `Fork point: the turns above are ${fork.turns === 1 ? "the first turn" : `the first ${fork.turns} turns`} of `,
      threadLink(fork.parent, ctx.nameOf(fork.parent)), ` (to seq ${fork.seq}); this thread goes on below.`));
  }
  const total = {};
  for (const t of th.turns) {
    const u = t.turn_type === "agent" ? turnUsage(t) : null;
    for (const k of TOKENS) if (u && typeof u[k] === "number") total[k] = (total[k] || 0) + u[k];
  }
  view.where.textContent = th.title || id;
  view.app.replaceChildren(h("div", {},
    h("h1", {}, th.title || "Untitled thread", me ? activityBadge(me.activity) : null),
    h("p", { class: "meta" }, h("code", { class: "tid" }, id),
      ` · created ${th.created_at} · updated ${th.updated_at} · version ${d.turns.version}`,
      Object.keys(total).length ? h("span", { class: "usage-total" }, ` · usage: ${usageText(total)}`) : null),
    agentsLine(th),
    fork ? h("div", { class: "fork-summary", role: "status" }, "Forked from ",
      threadLink(fork.parent, ctx.nameOf(fork.parent)),
      ` at turn ${fork.turns} (seq ${fork.seq})`, fork.reason ? `: ${fork.reason}` : "") : null,
    waiting.length ? h("div", { class: "pending-summary", role: "status" },
      `${waiting.length} tool call${waiting.length > 1 ? "s" : ""} waiting: `,
      waiting.map((pc, i) => [i ? ", " : "", h("b", {}, pc.tool_name), ` (${pendingLabel(pc)})`])) : null,
    d.interrupts.interrupted ? h("div", { class: "interrupted-summary" },
      `The last agent turn was interrupted (${d.interrupts.last.reason})`) : null,
    h("div", { class: "layout" },
      h("div", { class: "conversation" }, turns.length ? turns : h("p", { class: "muted" }, "No turns yet.")),
      familyTree(d.family, id))));
}

function findNode(node, id) {
  if (node.thread_id === id) return node;
  for (const c of node.children || []) {
    const f = findNode(c, id);
    if (f) return f;
  }
  return null;
}

// Opened from a search hit: mark the hit's turn (search numbers turns from 1; 0 is the title or
// metadata), highlight the query's words, scroll there once.
function showHit(view, params, scroll) {
  if (!params.q && params.turn === undefined) return;
  const conv = view.app.querySelector(".conversation");
  highlight(conv, queryWords(params.q));
  const index = Number(params.turn) - 1;
  const turn = index >= 0 ? conv.querySelector(`[data-turn="${index}"]`) : null;
  if (!turn) return;
  turn.classList.add("hit-turn");
  if (scroll) (turn.querySelector("mark.hl") || turn).scrollIntoView({ block: "center" });
}

// j/k or arrows move from turn to turn (the page re-renders live: the position is a turn index)
function turnKeys(view) {
  let at = -1;
  return (e) => {
    const step = e.key === "j" || e.key === "ArrowDown" ? 1 : e.key === "k" || e.key === "ArrowUp" ? -1 : 0;
    const turns = view.app.querySelectorAll("section.turn");
    if (!step || !turns.length) return false;
    at = Math.max(0, Math.min(turns.length - 1, at + step));
    turns.forEach((t, n) => t.classList.toggle("selected", n === at));
    turns[at].setAttribute("tabindex", "-1");
    turns[at].focus({ preventScroll: true });
    turns[at].scrollIntoView({ block: "nearest" });
    return true;
  };
}

export async function showThread(view, id, params) {
  view.where.textContent = id;
  let d = await fetchThread(id);
  if (!view.current()) return;
  renderThread(view, id, d);
  showHit(view, params, true);
  view.keys = turnKeys(view);
  // Follow the thread: any new event re-reads and re-renders it (coalesced while one is in flight).
  let busy = false;
  let again = false;
  const refresh = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do {
        again = false;
        d = await fetchThread(id);
        if (!view.current()) return;
        const y = window.scrollY;
        renderThread(view, id, d);
        showHit(view, params, false);
        window.scrollTo(0, y);
      } while (again);
    } catch (e) { /* a failed refresh keeps the last view; the next event retries */ } finally { busy = false; }
  };
  view.follow(id, d.turns.version, refresh);
}
