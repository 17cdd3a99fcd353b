// The tplog thread browser: routing (#/ the list, #/thread/ID a thread), the keyboard, and the
// SSE tail that keeps an open thread current. The views live in list.js and thread.js.
import { h } from "./dom.js";
import { listHash, showList } from "./list.js";
import { showThread } from "./thread.js";

const app = document.getElementById("app");
const where = document.getElementById("where");
const liveMark = document.getElementById("live");
let tail = null; // the AbortController of the open thread's event tail
let nav = 0; // bumped on each navigation: a view still loading for an older one drops its result
let view = null;
let lastList = "#/"; // where Esc goes back to from a thread
let focusSearch = false; // "/" pressed on a thread: the list's search box gets the focus once shown

function showError(err) {
  app.replaceChildren(h("p", { class: "error" }, String(err.message || err)));
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

function route() {
  if (tail) tail.abort();
  tail = null;
  liveMark.hidden = true;
  const [path, qs] = location.hash.replace(/^#/, "").split("?", 2);
  const params = Object.fromEntries(new URLSearchParams(qs || ""));
  const me = ++nav;
  const ctl = new AbortController();
  view = { app, where, keys: null, current: () => me === nav,
    follow: (id, after, onEvent) => { tail = ctl; follow(id, after, ctl, onEvent); } };
  const m = (path || "").match(/^\/thread\/(.+)$/);
  if (!m) lastList = listHash(params);
  const shown = m ? showThread(view, decodeURIComponent(m[1]), params) : showList(view, params);
  shown.then(() => {
    const q = document.getElementById("q");
    if (focusSearch && me === nav && q) q.focus();
    focusSearch = false;
  }, (e) => me === nav && showError(e));
  window.scrollTo(0, 0);
}

// "/" searches, Esc goes back (or leaves a field), the list's own keys move and open
document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const typing = /^(INPUT|SELECT|TEXTAREA)$/.test(e.target.tagName);
  if (e.key === "Escape") {
    if (typing) e.target.blur();
    else if (location.hash.startsWith("#/thread/")) location.hash = lastList;
    return;
  }
  if (typing) return;
  if (e.key === "/") {
    const q = document.getElementById("q");
    e.preventDefault();
    if (q) { q.focus(); q.select(); } else { focusSearch = true; location.hash = lastList; }
    return;
  }
  if (view && view.keys && view.keys(e)) e.preventDefault();
});

window.addEventListener("hashchange", route);
route();
