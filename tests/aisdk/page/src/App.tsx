// A minimal chat page on `tplog serve`: React and the AI SDK's useChat (Vite proxies /api to tplog serve).
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, type UIMessage } from "ai";
import { useEffect, useState } from "react";

// The chat id is in the URL: a reload is the same chat, and `resume: true` picks up an answer still running.
const chatId = new URLSearchParams(location.search).get("chat") ?? crypto.randomUUID();
history.replaceState(null, "", `?chat=${chatId}`);

export default function App() {
  // the chat so far, as the thread recorded it (with the ids the chat showed): [] for a new chat
  const [saved, setSaved] = useState<UIMessage[]>();
  useEffect(() => {
    fetch(`/api/chat/${chatId}/messages`).then((r) => r.json()).then(setSaved);
  }, []);
  return saved && <Chat saved={saved} />;
}

function Chat({ saved }: { saved: UIMessage[] }) {
  const [input, setInput] = useState("");
  const { messages, sendMessage, addToolApprovalResponse, stop, status, error } = useChat({
    id: chatId,
    messages: saved,
    resume: true,
    transport: new DefaultChatTransport({ api: "/api/chat" }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const busy = status === "submitted" || status === "streaming";
  return (
    <main>
      {messages.map((m) => (
        <div key={m.id} className={m.role}>
          {m.parts.map((p, i) =>
            p.type === "text" ? (
              <p key={i}>{p.text}</p>
            ) : p.type.startsWith("tool-") && "state" in p && p.state === "approval-requested" ? (
              <p key={i}>
                {p.type.slice(5)} {JSON.stringify(p.input)}{" "}
                <button onClick={() => addToolApprovalResponse({ id: p.approval.id, approved: true })}>Approve</button>
                <button onClick={() => addToolApprovalResponse({ id: p.approval.id, approved: false })}>Deny</button>
              </p>
            ) : null,
          )}
        </div>
      ))}
      {error && <p className="error">{error.message}</p>}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (!input.trim()) return;
          sendMessage({ text: input });
          setInput("");
        }}
      >
        <input value={input} onChange={(e) => setInput(e.target.value)} placeholder="Say something" />
        {/* keys: two elements, or React would turn the clicked Stop into a submit button mid-click */}
        {busy ? (
          <button key="stop" type="button" onClick={() => stop()}>Stop</button>
        ) : (
          <button key="send" type="submit">Send</button>
        )}
      </form>
    </main>
  );
}
