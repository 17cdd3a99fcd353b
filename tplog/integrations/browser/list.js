// The thread list (#/?q=…&activity=…&agent=…&meta=…): one GET /threads per page, filtered and
// searched by the server, paged by its cursor. Rows become cards at phone width (app.css).
import { ACTIVITY, activityBadge, api, enc, h, shortId, snippet, threadHref, timeAgo } from "./dom.js";

const FILTERS = ["q", "activity", "agent", "meta", "limit"];

// The list's address for these parameters (empty ones dropped)
export function listHash(params) {
  const qs = FILTERS.filter((k) => params[k]).map((k) => `${k}=${enc(params[k])}`).join("&");
  return "#/" + (qs ? "?" + qs : "");
}

function form(params) {
  const input = (name, attrs) => h("input", { name, id: name, value: params[name] || "", ...attrs });
  const select = h("select", { name: "activity", id: "activity", "aria-label": "activity" },
    h("option", { value: "" }, "any activity"),
    ["running", "waiting", "waiting_approval", "waiting_tools", "interrupted", "idle"].map((a) =>
      h("option", { value: a, selected: params.activity === a }, a === "waiting" ? "waiting (any)"
        : ACTIVITY[a === "running" ? "active" : a])));
  const f = h("form", { id: "filters", role: "search" },
    input("q", { type: "search", placeholder: "Search threads  ( / )", "aria-label": "search", autocomplete: "off" }),
    select,
    input("agent", { type: "text", placeholder: "agent id", "aria-label": "agent id", size: 12 }),
    input("meta", { type: "text", placeholder: "metadata key=value", "aria-label": "metadata", size: 14 }),
    h("button", { type: "submit" }, "Apply"));
  f.addEventListener("submit", (e) => {
    e.preventDefault();
    const data = Object.fromEntries(new FormData(f).entries());
    if (params.limit) data.limit = params.limit;
    location.hash = listHash(data);
  });
  select.addEventListener("change", () => f.requestSubmit());
  return f;
}

// One thread's row (exported for the page's tests of a search answer's rendering)
export function row(t, q) {
  const names = t.agent_names || {};
  const hit = t.hit;
  const open = hit ? threadHref(t.thread_id, `turn=${hit.turn}&seq=${hit.seq}&q=${enc(q)}`) : threadHref(t.thread_id);
  const deleted = t.status === "deleted";
  return h("tr", { "data-thread": t.thread_id, "data-activity": t.activity, class: deleted ? "deleted" : null },
    h("td", { class: "title-cell", "data-label": "thread" },
      h("a", { href: open, class: "title" }, t.title || "Untitled thread"),
      deleted ? h("span", { class: "badge deleted" }, "deleted") : null,
      t.fork_of ? h("span", { class: "badge fork", title: `forked from ${t.fork_of}` }, "fork") : null,
      h("div", {}, h("code", { class: "tid", title: t.thread_id }, shortId(t.thread_id))),
      hit ? h("div", { class: "hit" }, snippet(hit.snippet),
        h("span", { class: "meta" }, hit.turn ? ` turn ${hit.turn} · ${hit.field}` : ` ${hit.field}`)) : null),
    h("td", { "data-label": "activity" }, activityBadge(t.activity)),
    h("td", { class: "agents", "data-label": "agents" }, (t.agent_ids || []).map((id) =>
      h("a", { href: listHash({ agent: id }), class: "agent", title: `agent id ${id}` }, names[id] || id))),
    h("td", { class: "num", "data-label": "messages", title: `${t.user_turns} user / ${t.agent_turns} agent turns` },
      String(t.messages)),
    h("td", { "data-label": "updated" }, timeAgo(t.updated_ns)));
}

export async function showList(view, params) {
  view.where.textContent = params.q ? `search: ${params.q}` : "threads";
  const rows = h("tbody");
  const status = h("div", { id: "status", role: "status" });
  const more = h("button", { id: "more", hidden: true }, "Load more");
  let cursor = null;

  async function load() {
    more.disabled = true;
    const qs = FILTERS.filter((k) => params[k] && k !== "limit").map((k) => `&${k}=${enc(params[k])}`).join("");
    const url = `/threads?limit=${enc(params.limit || 50)}${qs}${cursor ? "&after=" + enc(cursor) : ""}`;
    let page;
    try {
      page = await api(url);
    } catch (e) {
      if (!view.current()) return;
      const what = params.q ? "Search failed" : "Could not list threads";
      status.replaceChildren(h("p", { class: "error" }, `${what}: ${e.message}`));
      more.disabled = false;
      return;
    }
    if (!view.current()) return;
    for (const t of page.threads) rows.appendChild(row(t, params.q));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    more.disabled = false;
    const notes = [];
    if (params.q && !page.search) {
      notes.push("This server does not search thread contents: the list shows every thread the filters keep.");
    }
    if (page.search && page.search.behind > 0) {
      notes.push(`The search index is ${page.search.behind} events behind the log: the newest may be missing.`);
    }
    if (!rows.children.length) notes.push(params.q || params.activity || params.agent || params.meta
      ? "No threads match." : "No threads yet.");
    status.replaceChildren(...notes.map((n) => h("p", { class: "muted" }, n)));
  }

  more.addEventListener("click", () => load());
  view.app.replaceChildren(
    h("h1", {}, params.q ? "Search" : "Threads"), form(params), status,
    h("table", { class: "threads" },
      h("thead", {}, h("tr", {}, ["thread", "activity", "agents", "messages", "updated"].map((c) =>
        h("th", { class: c === "messages" ? "num" : null }, c)))),
      rows),
    more);
  await load();
  view.keys = listKeys(rows);
}

// j/k or arrows move the selection, Enter opens it
function listKeys(rows) {
  let at = -1;
  const select = (i) => {
    const all = rows.querySelectorAll("tr");
    if (!all.length) return;
    at = Math.max(0, Math.min(all.length - 1, i));
    all.forEach((r, n) => {
      r.classList.toggle("selected", n === at);
      r.setAttribute("aria-selected", String(n === at));
    });
    const link = all[at].querySelector("a.title");
    link.focus({ preventScroll: true });
    all[at].scrollIntoView({ block: "nearest" });
  };
  return (e) => {
    if (e.key === "j" || e.key === "ArrowDown") select(at + 1);
    else if (e.key === "k" || e.key === "ArrowUp") select(at - 1);
    else if (e.key === "Enter" && at >= 0) rows.querySelectorAll("tr")[at].querySelector("a.title").click();
    else return false;
    return true;
  };
}
