// The real Vercel AI SDK client (npm `ai`) driving `tplog serve` over HTTP, as a browser app would:
// the framework-agnostic chat class (AbstractChat, what useChat wraps) over DefaultChatTransport.
//
//   node client.mjs MAJOR SCENARIO CONFIG_JSON
//
// MAJOR: 6 or 7 (the `ai6` / `ai7` aliases of package.json). CONFIG_JSON: {"api": "http://.../api/chat",
// "chatId": "...", "headers": {...} (optional, on every request), "resumeApi": "http://other-server/api/chat" (optional)}. Prints one JSON object:
// the chat's final status, error, messages, what `validateUIMessages` said of them, the transient
// data chunks seen, and per request the worker (x-tplog-worker) and status that served it.

const [major, scenario, configText] = process.argv.slice(2);
const config = JSON.parse(configText ?? "{}");
const ai = await import(major === "7" ? "ai7" : "ai6");
const { AbstractChat, DefaultChatTransport, validateUIMessages, generateId, readUIMessageStream } = ai;

class State {
  constructor(messages = []) {
    this.status = "ready";
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage = (m) => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = (x) => structuredClone(x);
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) { super({ ...init, state: new State(messages) }); }
}

const requests = []; // {method, url, status, worker}
const data = []; // onData: data parts the SDK did not keep in the message (transient) or did
let cutAfter = null; // a string: the response body is cut (a network error) once it has been seen

function trackingFetch(input, init) {
  return globalThis.fetch(input, init).then((res) => {
    const row = { method: init?.method ?? "GET", url: String(input), status: res.status,
                  worker: res.headers.get("x-tplog-worker"),
                  bodyBytes: typeof init?.body === "string" ? Buffer.byteLength(init.body) : 0 };
    requests.push(row);
    if (cutAfter == null || row.method !== "POST" || res.body == null) return res;
    const marker = cutAfter;
    cutAfter = null;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let seen = "";
    let cutNext = false;
    const body = new ReadableStream({
      async pull(controller) {
        if (cutNext) {
          // Erroring a stream drops what it still holds: cut only once the chat shows the marker
          // (a loaded machine may deliver word0..word2 in the one chunk that was just enqueued).
          for (let i = 0; i < 1200 && !chatShows(marker); i++) await new Promise((r) => setTimeout(r, 25));
          row.cut = true;
          await reader.cancel(); // the connection goes away, as when the network drops
          controller.error(new TypeError("network error")); // what fetch raises then
          return;
        }
        const { done, value } = await reader.read();
        if (done) { controller.close(); return; }
        controller.enqueue(value);
        seen += decoder.decode(value, { stream: true });
        cutNext = seen.includes(marker);
      },
      cancel(reason) { return reader.cancel(reason); },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  });
}

function chatShows(text) {
  const last = chat?.messages.at(-1);
  return last?.role === "assistant" && last.parts.some((p) => p.type === "text" && p.text.includes(text));
}

let sends = 0;

function makeChat(id, extra = {}) {
  const transport = new DefaultChatTransport({
    api: config.api,
    headers: config.headers, // e.g. the app's user (tests/aisdk/cs_app.py)
    fetch: trackingFetch,
    // config.secondApi: the requests after the first go to another server (on the same store)
    prepareSendMessagesRequest: config.secondApi
      ? ({ id: chatId, messages, body, trigger, messageId }) => ({
          api: sends++ === 0 ? config.api : config.secondApi,
          body: { ...body, id: chatId, messages, trigger, messageId },
        })
      : undefined,
    prepareReconnectToStreamRequest: config.resumeApi
      ? ({ id: chatId }) => ({ api: `${config.resumeApi}/${encodeURIComponent(chatId)}/stream` })
      : undefined,
  });
  return new Chat({ id, transport, generateId, onData: (part) => data.push(part), ...extra });
}

function toolParts(chat) {
  return chat.messages.flatMap((m) => m.parts.filter((p) => p.type.startsWith("tool-")));
}

async function waitFor(fn, ms = 30000) {
  const end = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > end) throw new Error("timed out waiting for a condition");
    await new Promise((r) => setTimeout(r, 20));
  }
}

const chatId = config.chatId ?? generateId();
const notes = {};
let chat;

switch (scenario) {
  case "text": {
    chat = makeChat(chatId);
    await chat.sendMessage({ text: "hello there" });
    await chat.sendMessage({ text: "and again" });
    break;
  }
  case "tools": {
    chat = makeChat(chatId);
    await chat.sendMessage({ text: "weather in Paris" });
    break;
  }
  case "short_chat": {
    // a short chat: text, a tool, text; then one more message (whose request carries the history)
    chat = makeChat(chatId);
    for (const text of ["hello", "weather in Paris", "weather in Berlin", "thanks"]) {
      await chat.sendMessage({ text });
    }
    break;
  }
  case "approvals": {
    chat = makeChat(chatId);
    await chat.sendMessage({ text: "delete /tmp/x" });
    const part = toolParts(chat).find((p) => p.state === "approval-requested");
    notes.approvalRequested = part != null;
    if (part) {
      await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
      await chat.sendMessage();
    }
    break;
  }
  case "client_tools": {
    const calls = [];
    chat = makeChat(chatId, { onToolCall: ({ toolCall }) => { calls.push(toolCall); } });
    await chat.sendMessage({ text: "where am i" });
    notes.toolCalls = calls.map((c) => c.toolName);
    const call = calls.find((c) => c.toolName === "get_location");
    if (call) {
      await chat.addToolOutput({ tool: "get_location", toolCallId: call.toolCallId, output: "Berlin" });
      await chat.sendMessage();
    }
    break;
  }
  case "resume": {
    // the connection drops mid-turn; the chat reconnects (GET {api}/{id}/stream, on resumeApi's server)
    chat = makeChat(chatId);
    cutAfter = config.cutAfter ?? "word2";
    await chat.sendMessage({ text: config.text ?? "slow 30 60" });
    notes.afterCut = { status: chat.status, error: chat.error?.message ?? null,
                       text: chat.messages.at(-1)?.parts.filter((p) => p.type === "text").map((p) => p.text).join("") };
    await chat.resumeStream();
    break;
  }
  case "abort_reconnect": {
    // the user stops mid-text (the SDK aborts the fetch; the server finishes the run), then the app
    // reconnects itself and reads the stream with the SDK's own processor (readUIMessageStream)
    // (config.sendAgain: after the stop the user sends again, and the app reconnects during that answer)
    chat = makeChat(chatId);
    const first = chat.sendMessage({ text: config.text ?? "slow 30 60" });
    await waitFor(() => chatShows("word1"));
    await chat.stop();
    await first;
    let second = null;
    if (config.sendAgain) {
      second = chat.sendMessage({ text: config.sendAgain });
      await waitFor(() => chat.messages.length === 4 && chatShows("word1"));
    }
    const transport = new DefaultChatTransport({ api: config.api, fetch: trackingFetch });
    const stream = await transport.reconnectToStream({ chatId });
    notes.reconnected = stream != null;
    if (stream) {
      let last;
      try {
        for await (const message of readUIMessageStream({ stream, terminateOnError: true })) last = message;
      } catch (err) {
        notes.resumeError = String(err?.message ?? err);
      }
      notes.resumed = last == null ? null
        : last.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
    }
    await second;
    break;
  }
  case "reload": {
    // a reloaded page: the chat so far from the server, then useChat({id, messages}) goes on with it
    const res = await trackingFetch(`${config.api}/${encodeURIComponent(chatId)}/messages`,
                                    { method: "GET", headers: config.headers });
    const saved = await res.json();
    notes.saved = structuredClone(saved);
    chat = makeChat(chatId, { messages: saved });
    await chat.sendMessage({ text: "after reload" });
    break;
  }
  case "idle_resume": {
    // useChat({resume: true}) on mount: nothing is running, the SDK expects 204 and stays ready
    chat = makeChat(chatId);
    await chat.resumeStream();
    break;
  }
  case "stop_then_send": {
    chat = makeChat(chatId);
    const first = chat.sendMessage({ text: config.text ?? "slow 200 50" });
    await waitFor(() => chat.messages.at(-1)?.role === "assistant"
      && chat.messages.at(-1).parts.some((p) => p.type === "text" && p.text.includes("word1")));
    await chat.stop();
    await first;
    notes.afterStop = { status: chat.status, error: chat.error?.message ?? null };
    await chat.sendMessage({ text: "hello after stop" });
    break;
  }
  default:
    console.error(`unknown scenario ${scenario}`);
    process.exit(2);
}

let validation = null; // the SDK's own check of the history (it refuses an empty one)
if (chat.messages.length > 0) {
  try {
    await validateUIMessages({ messages: chat.messages });
    validation = { ok: true };
  } catch (err) {
    validation = { ok: false, error: String(err?.message ?? err) };
  }
}

console.log(JSON.stringify({
  major: Number(major),
  version: (await import(major === "7" ? "ai7/package.json" : "ai6/package.json", { with: { type: "json" } })).default.version,
  chatId,
  status: chat.status,
  error: chat.error ? String(chat.error.message ?? chat.error) : null,
  messages: chat.messages,
  bytes: JSON.stringify(chat.messages).length,
  validation,
  data,
  requests,
  notes,
}));
