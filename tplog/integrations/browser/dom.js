// Shared helpers of the thread browser: building elements, reading the JSON API, formatting.
// Stored text only ever enters the page through text nodes and attributes, never as HTML.

// h("div", {class: "x"}, child, "text", [more]) -> an element; strings become text nodes
export function h(tag, attrs, ...children) {
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

// An error answer of the API: what the server said (its error object), for a readable message.
export class ApiError extends Error {
  constructor(path, status, code, message) {
    super(`${message} (HTTP ${status}${code ? ", " + code : ""})`);
    this.path = path;
    this.status = status;
    this.code = code;
  }
}

export async function api(path) {
  const resp = await fetch(path, { headers: { accept: "application/json" } });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const err = body && body.error ? body.error : {};
    throw new ApiError(path, resp.status, err.code, err.message || resp.statusText || "request failed");
  }
  return body;
}

export const enc = encodeURIComponent;
export const threadHref = (id, extra) => "#/thread/" + enc(id) + (extra ? "?" + extra : "");
export const threadLink = (id, text, cls) => h("a", { href: threadHref(id), class: cls || "tid" }, text || id);
export const shortId = (id) => (id.length > 13 ? id.slice(0, 8) + "…" : id);
export const pretty = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));
export const label = (text) => h("span", { class: "label" }, text);
// Only web and inline URLs become links: no javascript: or other schemes. Only inline (data:)
// media are shown: fetching a stored web address would tell its owner who reads the thread.
export const safeUrl = (u) => (typeof u === "string" && /^(https?:|data:)/i.test(u) ? u : null);
export const inlineUrl = (u) => (typeof u === "string" && /^data:/i.test(u) ? u : null);

// An inline file: an image is shown, anything else is named with its type and size
export function binary(b) {
  const desc = `${b.identifier || "file"} (${b.media_type}, ${Math.round((b.data || "").length * 0.75)} bytes)`;
  if (/^image\//.test(b.media_type || "")) {
    return h("figure", {}, h("img", { src: `data:${b.media_type};base64,${b.data}`, alt: desc }),
      h("figcaption", {}, desc));
  }
  return h("div", { class: "file" }, label("file"), desc);
}

export const isoNs = (ns) => (ns ? new Date(Math.floor(ns / 1e6)).toISOString().replace(/\.\d{3}Z$/, "Z") : "");

// "5 min ago" with the exact UTC time on hover
export function timeAgo(ns) {
  if (!ns) return h("span", { class: "time" }, "");
  const s = Math.max(0, (Date.now() - ns / 1e6) / 1000);
  const steps = [[60, "s", 1], [3600, "min", 60], [86400, "h", 3600], [86400 * 30, "d", 86400],
    [86400 * 365, "mo", 86400 * 30], [Infinity, "y", 86400 * 365]];
  const [, unit, div] = steps.find(([lim]) => s < lim);
  const text = s < 10 ? "just now" : `${Math.floor(s / div)} ${unit} ago`;
  return h("time", { class: "time", datetime: isoNs(ns), title: isoNs(ns) }, text);
}

// What the head's activity means to a person (the store keeps "active" for running)
export const ACTIVITY = {
  active: "running", waiting_approval: "waiting on approval", waiting_tools: "waiting on tools",
  interrupted: "interrupted", idle: "idle",
};
export const activityBadge = (a) => h("span", { class: "badge act-" + (a || "idle") }, ACTIVITY[a] || a || "idle");

// A search snippet: U+E000 starts a highlight, U+E001 ends it; the text stays text.
export function snippet(s) {
  const out = h("span", { class: "snippet" });
  let mark = null;
  for (const piece of String(s).split(/([\uE000\uE001])/)) {
    if (piece === "\uE000") mark = h("mark");
    else if (piece === "\uE001") { if (mark) out.appendChild(mark); mark = null; }
    else if (piece) (mark || out).appendChild(document.createTextNode(piece));
  }
  if (mark) out.appendChild(mark);
  return out;
}

// Wraps each occurrence of the words in the text nodes under root in <mark class="hl">.
export function highlight(root, words) {
  const ws = words.filter((w) => w.length > 1).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  if (!ws.length) return 0;
  const re = new RegExp("(" + ws.join("|") + ")", "gi");
  const has = new RegExp(ws.join("|"), "i"); // no g flag: test() keeps no position between nodes
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) if (has.test(walker.currentNode.data)) nodes.push(walker.currentNode);
  for (const t of nodes) {
    const frag = document.createDocumentFragment();
    t.data.split(re).forEach((piece, i) => frag.appendChild(i % 2 ? h("mark", { class: "hl" }, piece)
      : document.createTextNode(piece)));
    t.replaceWith(frag);
  }
  return nodes.length;
}

// The words of a search query, without its operators and quotes
export const queryWords = (q) => String(q || "").replace(/["()*:^]/g, " ").split(/\s+/)
  .filter((w) => w && !/^(AND|OR|NOT|NEAR)$/.test(w));
