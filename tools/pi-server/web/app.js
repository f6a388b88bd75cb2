// The chat page of pi-server: keeps the conversation, sends it to
// /v1/chat/completions with stream: true, and appends each server-sent delta to the
// answer as it arrives. No build step, no dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const log = $("log"), input = $("input"), send = $("send"), stop = $("stop");
const fields = ["system", "temperature", "max_tokens", "api_key"];
let messages = [];
let controller = null;

for (const f of fields) {
  const saved = localStorage.getItem("pi-server." + f);
  if (saved !== null) $(f).value = saved;
  $(f).addEventListener("change", () => localStorage.setItem("pi-server." + f, $(f).value));
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api_key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const content = document.createElement("span");
  content.className = "content";
  content.textContent = text;
  div.appendChild(content);
  log.appendChild(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

async function refreshInfo() {
  try {
    const r = await fetch("v1/models", { headers: headers() });
    const j = await r.json();
    if (r.ok && j.data && j.data.length) {
      const m = j.data[0];
      $("model").textContent = m.id + (m.meta ? " · " + m.meta.n_ctx + " positions per slot" : "");
    } else {
      $("model").textContent = (j.error && j.error.message) || "model unknown";
    }
  } catch (e) {
    $("model").textContent = "server unreachable";
  }
  try {
    const h = await (await fetch("health")).json();
    $("slots").textContent = h.slots_idle + " of " + (h.slots_idle + h.slots_busy) + " slots idle";
  } catch (e) { /* the next refresh tries again */ }
}

// Read a stream of server-sent events and call onData with each parsed "data:" object.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }
}

async function ask(text) {
  messages.push({ role: "user", content: text });
  addMessage("user", text);
  const div = addMessage("assistant", "");
  div.classList.add("streaming");
  const content = div.querySelector(".content");
  let chunks = 0, answer = "", finish = null;
  const t0 = performance.now();
  let tFirst = 0;
  controller = new AbortController();
  send.disabled = true;
  stop.disabled = false;
  const body = {
    messages: ($("system").value.trim() ? [{ role: "system", content: $("system").value.trim() }] : []).concat(messages),
    stream: true,
    temperature: Number($("temperature").value),
    max_tokens: Number($("max_tokens").value),
  };
  try {
    const r = await fetch("v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || ("HTTP " + r.status));
    }
    await readEvents(r, (j) => {
      if (j.error) throw new Error(j.error.message);
      const c = j.choices && j.choices[0];
      if (!c) return;
      if (c.delta && c.delta.content) {
        if (!tFirst) tFirst = performance.now();
        answer += c.delta.content;
        content.textContent = answer;
        chunks++;
        div.dataset.chunks = String(chunks);
        div.scrollIntoView({ block: "end" });
      }
      if (c.finish_reason) finish = c.finish_reason;
    });
    messages.push({ role: "assistant", content: answer });
    const meta = document.createElement("span");
    meta.className = "meta";
    const secs = (performance.now() - t0) / 1000;
    meta.textContent = chunks + " chunks · " + secs.toFixed(1) + " s" +
      (tFirst ? " · first token after " + ((tFirst - t0) / 1000).toFixed(2) + " s" : "") +
      (finish ? " · " + finish : "");
    div.appendChild(meta);
  } catch (e) {
    const err = document.createElement("span");
    err.className = "error";
    err.textContent = e.name === "AbortError" ? " [stopped]" : " [" + e.message + "]";
    div.appendChild(err);
    if (answer) messages.push({ role: "assistant", content: answer });
  } finally {
    div.classList.remove("streaming");
    div.dataset.done = "1";
    controller = null;
    send.disabled = false;
    stop.disabled = true;
    refreshInfo();
  }
}

$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text || controller) return;
  input.value = "";
  ask(text);
});
input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("form").requestSubmit();
  }
});
stop.addEventListener("click", () => controller && controller.abort());
$("clear").addEventListener("click", () => { messages = []; log.textContent = ""; });
refreshInfo();
