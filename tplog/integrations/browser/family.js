// The thread's family (GET /threads/{id}/family) as a tree: its oldest ancestor reached, the
// spawned children and forks below it, the open thread marked; its other links beside.
import { ACTIVITY, h, shortId, threadLink } from "./dom.js";

function node(n, current) {
  const here = n.thread_id === current;
  const name = n.missing ? `${shortId(n.thread_id)} (not visible)` : n.title || shortId(n.thread_id);
  const fork = n.fork;
  return h("li", { "data-thread": n.thread_id, class: (here ? "current" : "") + (fork ? " fork" : "") },
    here ? h("b", { "aria-current": "page", title: n.thread_id }, name)
      : n.missing ? h("span", { class: "muted", title: n.thread_id }, name) : threadLink(n.thread_id, name),
    fork ? h("span", { class: "rel", title: fork.reason || "" },
      `fork at ${fork.branch_point ? fork.branch_point.replace("_", " ") : "seq " + fork.seq}` +
      (fork.reason ? `: ${fork.reason}` : "")) : null,
    n.deleted ? h("span", { class: "rel" }, "deleted")
      : n.activity && n.activity !== "idle"
        ? h("span", { class: "rel act" }, ACTIVITY[n.activity] || n.activity) : null,
    n.children && n.children.length ? h("ul", {}, n.children.map((c) => node(c, current))) : null);
}

export function familyTree(fam, current) {
  const group = (title, cls, items) => (items.length
    ? h("div", { class: "links " + cls }, h("h3", {}, title), h("ul", {}, items)) : null);
  const linkItem = (l) => h("li", {}, threadLink(l.thread_id, shortId(l.thread_id)),
    h("span", { class: "rel" }, l.relation));
  const lone = !fam.root.children.length && fam.root.thread_id === current;
  return h("nav", { class: "tree", "aria-label": "thread family" },
    lone ? null : h("div", { class: "links family" }, h("h3", {}, "Family"), h("ul", { class: "family-tree" },
      node(fam.root, current))),
    fam.truncated ? h("p", { class: "muted small" }, "Only part of the family is shown.") : null,
    group("Links to", "outgoing", fam.links.map(linkItem)),
    group("Linked from", "incoming", fam.incoming.map(linkItem)));
}
