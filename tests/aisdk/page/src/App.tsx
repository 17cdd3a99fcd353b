// A minimal chat page on `tplog serve`: React and the AI SDK's useChat (Vite proxies /api to tplog serve).
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { useState } from "react";

// The chat id is in the URL: a reload is the same chat, and `resume: true` picks up an answer still running.
const chatId = new URLSearchParams(location.search).get("chat") ?? crypto.randomUUID();
history.replaceState(null, "", `?chat=${chatId}`);

export default function App() {
  const [input, setInput] = useState("");
  const { messages, sendMessage, addToolApprovalResponse, stop, status, error } = useChat({
    id: chatId,
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
          sendMessage({ text: input });
          setInput("");
        }}
      >
        <input value={input} onChange={(e) => setInput(e.target.value)} placeholder="Say something" />
        {busy ? <button type="button" onClick={() => stop()}>Stop</button> : <button type="submit">Send</button>}
      </form>
    </main>
  );
}
