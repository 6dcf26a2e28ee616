// strata's page: a chat that streams from /v1/chat/completions (conversations kept in this browser's
// localStorage) and a monitor that reads /v1/status every second. Nothing is fetched from elsewhere.
"use strict";

const $ = (id) => document.getElementById(id);
const STORE = "strata.conversations";
const KEY = "strata.key";

// ---- the API, with the key when the server asks for one ----

async function api(path, options = {}, retried = false) {
  const headers = Object.assign({ "content-type": "application/json" }, options.headers || {});
  const key = localStorage.getItem(KEY);
  if (key) headers.authorization = "Bearer " + key;
  const res = await fetch(path, Object.assign({}, options, { headers }));
  if (res.status === 401 && !retried) {
    await askKey();
    return api(path, options, true);
  }
  return res;
}

function askKey() {
  return new Promise((resolve) => {
    const d = $("key-dialog");
    d.addEventListener("close", () => {
      const k = $("key").value.trim();
      if (k) localStorage.setItem(KEY, k);
      resolve();
    }, { once: true });
    d.showModal();
  });
}

// ---- markdown: the text escaped first, then code, headings, lists, emphasis and links ----

function escapeHtml(s) {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function inline(s) {
  const codes = [];
  s = s.replace(/`([^`\n]+)`/g, (_, c) => { codes.push(c); return "\u0000" + (codes.length - 1) + "\u0000"; });
  s = s.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
       .replace(/(^|[^*])\*([^*\n]+)\*/g, "$1<em>$2</em>")
       .replace(/\[([^\]]+)\]\((https?:\/\/[^)\s]+)\)/g, '<a href="$2" target="_blank" rel="noopener">$1</a>');
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => "<code>" + codes[+i] + "</code>");
}

function markdown(text) {
  const out = [];
  const parts = escapeHtml(text).split(/```/);
  parts.forEach((part, i) => {
    if (i % 2 === 1) { // a fenced block: its first line names the language
      const nl = part.indexOf("\n");
      const body = nl >= 0 ? part.slice(nl + 1) : part;
      out.push("<pre><code>" + body.replace(/\n$/, "") + "</code></pre>");
      return;
    }
    let list = null;
    const close = () => { if (list) { out.push("</" + list + ">"); list = null; } };
    for (const para of part.split(/\n{2,}/)) {
      for (const line of para.split("\n")) {
        let m;
        if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
          close(); out.push("<h" + m[1].length + ">" + inline(m[2]) + "</h" + m[1].length + ">");
        } else if ((m = line.match(/^\s*[-*]\s+(.*)$/)) || (m = line.match(/^\s*\d+[.)]\s+(.*)$/))) {
          const kind = /^\s*\d/.test(line) ? "ol" : "ul";
          if (list !== kind) { close(); out.push("<" + kind + ">"); list = kind; }
          out.push("<li>" + inline(m[1]) + "</li>");
        } else if (line.trim()) {
          close(); out.push("<p>" + inline(line) + "</p>");
        }
      }
      close();
    }
  });
  return out.join("");
}

// ---- conversations, kept in localStorage ----

let conversations = JSON.parse(localStorage.getItem(STORE) || "[]");
let current = conversations.length ? conversations[0].id : null;
let running = null; // the AbortController of the reply being written

function save() { localStorage.setItem(STORE, JSON.stringify(conversations)); }
function conversation() { return conversations.find((c) => c.id === current); }

function newConversation() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", messages: [] };
  conversations.unshift(c);
  current = c.id;
  save();
  draw();
}

function drawList() {
  const ul = $("conversations");
  ul.innerHTML = "";
  for (const c of conversations) {
    const li = document.createElement("li");
    li.className = c.id === current ? "on" : "";
    const title = document.createElement("span");
    title.textContent = c.title;
    const del = document.createElement("button");
    del.textContent = "×";
    del.title = "Delete";
    del.onclick = (e) => {
      e.stopPropagation();
      conversations = conversations.filter((x) => x.id !== c.id);
      if (current === c.id) current = conversations.length ? conversations[0].id : null;
      save(); draw();
    };
    li.onclick = () => { if (!running) { current = c.id; draw(); } };
    li.append(title, del);
    ul.append(li);
  }
}

function messageDiv(m) {
  const div = document.createElement("div");
  div.className = "msg " + m.role + (m.error ? " error" : "");
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = m.role === "user" ? "You" : "Assistant" + (m.stopped ? " (stopped)" : "");
  const body = document.createElement("div");
  body.className = "body";
  if (m.role === "user") body.textContent = m.content; else body.innerHTML = markdown(m.content);
  div.append(who, body);
  return div;
}

function drawMessages() {
  const box = $("messages");
  box.innerHTML = "";
  const c = conversation();
  if (c) c.messages.forEach((m) => box.append(messageDiv(m)));
  box.scrollTop = box.scrollHeight;
}

function draw() { drawList(); drawMessages(); }

// ---- sending, streaming, stopping ----

async function send(text) {
  if (!conversation()) newConversation();
  const c = conversation();
  if (!c.messages.length) c.title = text.slice(0, 40);
  c.messages.push({ role: "user", content: text });
  const reply = { role: "assistant", content: "" };
  c.messages.push(reply);
  save(); draw();
  const body = $("messages").lastChild.querySelector(".body");
  running = new AbortController();
  $("send").hidden = true; $("stop").hidden = false;
  try {
    const res = await api("/v1/chat/completions", {
      method: "POST",
      signal: running.signal,
      body: JSON.stringify({
        messages: c.messages.slice(0, -1).filter((m) => !m.error).map(({ role, content }) => ({ role, content })),
        stream: true,
        temperature: +$("temperature").value,
        max_tokens: +$("max-tokens").value,
      }),
    });
    if (!res.ok) {
      const e = await res.json().catch(() => ({}));
      throw new Error((e.error && e.error.message) || res.statusText);
    }
    await readStream(res, (delta) => {
      reply.content += delta;
      body.innerHTML = markdown(reply.content);
      $("messages").scrollTop = $("messages").scrollHeight;
    });
  } catch (e) {
    if (e.name === "AbortError") reply.stopped = true;
    else { reply.content += (reply.content ? "\n\n" : "") + "Error: " + e.message; reply.error = true; }
  }
  running = null;
  $("send").hidden = false; $("stop").hidden = true;
  save(); draw();
}

// Server-sent events: each `data:` line a JSON chunk, `[DONE]` the end.
async function readStream(res, onText) {
  const reader = res.body.getReader();
  const utf8 = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += utf8.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta && delta.content) onText(delta.content);
      }
    }
  }
}

// ---- the monitor ----

const history = [];

function rate(x) { return x == null ? "–" : x >= 100 ? x.toFixed(0) : x.toFixed(1); }
function mib(b) { return b >= 1 << 30 ? (b / (1 << 30)).toFixed(1) + " GiB" : (b / (1 << 20)).toFixed(1) + " MiB"; }

function spark(values) {
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => (i * 120 / 59).toFixed(1) + "," + (30 - 28 * v / max).toFixed(1)).join(" ");
  $("m-spark").innerHTML = '<polyline fill="none" stroke="#2463c9" stroke-width="1.5" points="' + pts + '"/>';
}

async function poll() {
  if ($("monitor").hidden) return;
  let s;
  try {
    const res = await api("/v1/status");
    if (!res.ok) return;
    s = await res.json();
  } catch (e) { return; }
  const r = s.running;
  const live = r && r.decode_tokens_per_second != null;
  $("m-decode").textContent = rate(live ? r.decode_tokens_per_second : s.last.decode_tokens_per_second);
  $("m-decode-when").textContent = live ? "(now)" : "(last reply)";
  const reading = r && r.generated_tokens === 0;
  $("m-prefill").textContent = rate(reading ? r.prefill_tokens_per_second : s.last.prefill_tokens_per_second);
  $("m-prefill-when").textContent = reading ? "(now)" : "(last prompt)";
  $("m-queue").textContent = s.queue.waiting + " / " + s.queue.capacity;
  $("m-running").textContent = r
    ? "running: prompt " + r.read_tokens + "/" + r.prompt_tokens + " (" + r.reused_tokens + " reused), " + r.generated_tokens + " generated"
    : "idle";
  $("m-cache").textContent = s.cache.conversations;
  $("m-cache-bytes").textContent = "conversations, " + mib(s.cache.bytes) + " of " + mib(s.cache.budget_bytes);
  const mem = s.device_memory;
  $("m-memory").textContent = mem ? mib(mem.used_bytes) + " / " + mib(mem.total_bytes) : "host (CPU)";
  $("m-memory-bar").style.width = mem ? (100 * mem.used_bytes / mem.total_bytes).toFixed(1) + "%" : "0";
  $("m-memory-bar").parentNode.hidden = !mem;
  const sp = s.speculation;
  $("m-spec").textContent = sp.acceptance == null ? "–" : (100 * sp.acceptance).toFixed(0) + "%";
  $("m-spec-detail").textContent = sp.drafted ? sp.accepted + " of " + sp.drafted + " drafts accepted in " + sp.passes + " passes" : "no drafts yet";
  $("m-about").textContent = s.model + " on " + s.device + ", " + s.context + " cells of context, up " + s.uptime_seconds + " s";
  history.push(live ? r.decode_tokens_per_second : 0);
  if (history.length > 60) history.shift();
  spark(history);
}

// ---- wiring ----

function show(view) {
  for (const v of ["chat", "monitor"]) {
    $(v).hidden = v !== view;
    $("tab-" + v).classList.toggle("on", v === view);
  }
  poll();
}

$("tab-chat").onclick = () => show("chat");
$("tab-monitor").onclick = () => show("monitor");
$("new-chat").onclick = () => { if (!running) newConversation(); };
$("stop").onclick = () => running && running.abort();
$("composer").onsubmit = (e) => {
  e.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || running) return;
  $("prompt").value = "";
  send(text);
};
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
});
setInterval(poll, 1000);
api("/v1/models").then((r) => r.json()).then((m) => { $("model").textContent = m.data[0].id; }).catch(() => {});
draw();
