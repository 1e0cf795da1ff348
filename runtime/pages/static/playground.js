// The playground: a chat with the horde through the front's own OpenAI routes.
// Streams /v1/chat/completions as any OpenAI client does (stream with include_usage), reads
// the queue notes the front sends as SSE comment lines while the request waits, and shows
// after the reply what its last chunks carry (usage, x_horde) and what the page measured.
// Routes, parameter names and bounds come from the page's settings block, filled in by the
// front from the spec. The API key stays in this browser (localStorage) and goes only to
// this origin.
"use strict";

(() => {
  const S = JSON.parse(document.getElementById("settings").textContent);
  const P = S.params;
  const STORE = { key: "horde-chat.api-key", model: "horde-chat.model" };
  const $ = (id) => document.getElementById(id);
  const ui = {
    key: $("api-key"), model: $("model"), refresh: $("refresh-models"),
    modelsNote: $("models-note"), also: $("also-models"), alsoList: $("also-models-list"),
    system: $("system"), temperature: $("temperature"), temperatureValue: $("temperature-value"),
    maxTokens: $("max-tokens"), failFast: $("fail-fast"), newChat: $("new-chat"),
    log: $("log"), status: $("status"), composer: $("composer"), prompt: $("prompt"),
    send: $("send"), stop: $("stop"), settings: $("settings-panel"), docs: $("docs-link"),
  };
  const history = [];
  let running = null;

  // ---- settings ----------------------------------------------------------------------

  ui.docs.href = S.routes.docs;
  ui.key.placeholder = `anonymous (${S.anonymous_key})`;
  ui.key.value = localStorage.getItem(STORE.key) || "";
  ui.key.addEventListener("change", () => {
    const key = ui.key.value.trim();
    if (key) localStorage.setItem(STORE.key, key);
    else localStorage.removeItem(STORE.key);
    loadModels();
  });
  ui.temperature.min = S.temperature.min;
  ui.temperature.max = S.temperature.max;
  ui.temperature.step = "0.05";
  ui.temperature.value = S.temperature.default;
  const showTemperature = () => { ui.temperatureValue.value = Number(ui.temperature.value).toFixed(2); };
  ui.temperature.addEventListener("input", showTemperature);
  showTemperature();
  if (window.matchMedia("(max-width: 760px)").matches) ui.settings.open = false;

  function authHeaders() {
    const key = ui.key.value.trim();
    return key ? { Authorization: `Bearer ${key}` } : {};  // none: the anonymous key
  }

  async function apiError(response) {
    let message = `${response.status} ${response.statusText}`;
    let code = "";
    try {
      const body = await response.json();
      if (body && body.error) {
        message = body.error.message || message;
        code = body.error.code || body.error.type || "";
      }
    } catch (_) { /* not JSON: the status line says it */ }
    return { message, code, status: response.status };
  }

  function describeError(error) {
    const where = error.status ? `${error.status}${error.code ? ` ${error.code}` : ""}: ` : "";
    return where + error.message;
  }

  async function loadModels() {
    ui.modelsNote.textContent = "Loading models…";
    ui.modelsNote.classList.remove("error");
    let names = [];
    try {
      const response = await fetch(S.routes.models, { headers: authHeaders() });
      if (!response.ok) throw await apiError(response);
      names = (await response.json()).data.map((model) => model.id);
    } catch (error) {
      ui.modelsNote.textContent = `Models: ${describeError(error.message ? error : { message: String(error) })}`;
      ui.modelsNote.classList.add("error");
      return;
    }
    const chosen = ui.model.value || localStorage.getItem(STORE.model);
    ui.model.replaceChildren(...names.map((name) => new Option(name, name)));
    if (names.includes(chosen)) ui.model.value = chosen;
    ui.modelsNote.textContent = names.length
      ? `${names.length} model${names.length === 1 ? "" : "s"} online`
      : "No chat worker is online yet: Refresh once one is.";
    showAlsoModels(names);
  }

  function showAlsoModels(names) {
    const others = names.filter((name) => name !== ui.model.value);
    const checked = new Set(alsoModels());
    ui.alsoList.replaceChildren(...others.map((name) => {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = name;
      box.checked = checked.has(name);
      label.append(box, name);
      return label;
    }));
    ui.also.hidden = others.length === 0;
  }

  function alsoModels() {
    return [...ui.alsoList.querySelectorAll("input:checked")].map((box) => box.value);
  }

  ui.model.addEventListener("change", () => {
    localStorage.setItem(STORE.model, ui.model.value);
    showAlsoModels([...ui.model.options].map((option) => option.value));
  });
  ui.refresh.addEventListener("click", loadModels);
  $("settings-form").addEventListener("submit", (event) => event.preventDefault());
  ui.newChat.addEventListener("click", () => {
    stop();
    history.length = 0;
    ui.log.replaceChildren();
    ui.status.textContent = "";
    ui.prompt.focus();
  });

  // ---- the conversation ----------------------------------------------------------------

  function addMessage(role, text) {
    const item = document.createElement("li");
    item.className = `message ${role}`;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = role === S.roles.user ? "You" : "Horde";
    const body = document.createElement("p");
    body.className = "text";
    body.textContent = text;
    item.append(who, body);
    ui.log.append(item);
    item.scrollIntoView({ block: "end" });
    return item;
  }

  function requestBody(text) {
    const messages = [];
    const system = ui.system.value.trim();
    if (system) messages.push({ role: S.roles.system, content: system });
    messages.push(...history, { role: S.roles.user, content: text });
    const body = {
      [P.model]: ui.model.value,
      [P.messages]: messages,
      [P.stream]: true,
      [P.stream_options]: { [P.include_usage]: true },
      [P.temperature]: Number(ui.temperature.value),
    };
    const also = alsoModels();
    if (also.length) body[P.models] = [ui.model.value, ...also];
    const maxTokens = parseInt(ui.maxTokens.value, 10);
    if (maxTokens > 0) body[P.max_tokens] = maxTokens;
    if (ui.failFast.checked) body[P.horde] = { [S.horde.availability_mode]: S.horde.fail_fast };
    return body;
  }

  // One reply as it streams in: its text, reasoning, what the chunks said and the clock.
  class Reply {
    constructor(item) {
      this.item = item;
      this.text = item.querySelector(".text");
      this.content = "";
      this.reasoning = "";
      this.reasoningBox = null;
      this.started = performance.now();
      this.firstToken = null;
      this.model = "";
      this.usage = null;
      this.horde = null;
      this.finish = null;
      item.setAttribute("aria-busy", "true");
    }

    addContent(piece) {
      this.firstToken ??= performance.now();
      this.content += piece;
      this.text.textContent = this.content;
      if (this.reasoningBox && this.reasoningBox.open && this.reasoningBox.dataset.auto) {
        this.reasoningBox.open = false;  // the answer began: fold the thinking away
      }
      this.item.scrollIntoView({ block: "end" });
    }

    addReasoning(piece) {
      this.firstToken ??= performance.now();
      this.reasoning += piece;
      if (!this.reasoningBox) {
        this.reasoningBox = document.createElement("details");
        this.reasoningBox.className = "reasoning";
        this.reasoningBox.open = true;
        this.reasoningBox.dataset.auto = "1";
        const summary = document.createElement("summary");
        // once the reader opens or closes it, it stays as they left it
        summary.addEventListener("click", () => { delete this.reasoningBox.dataset.auto; });
        this.reasoningBox.append(summary, document.createElement("pre"));
        this.text.before(this.reasoningBox);
      }
      this.reasoningBox.querySelector("summary").textContent = `Reasoning (${this.reasoning.length} characters)`;
      this.reasoningBox.querySelector("pre").textContent = this.reasoning;
    }

    chunk(payload) {
      if (payload.model) this.model = payload.model;
      if (payload.usage) this.usage = payload.usage;
      if (payload.x_horde) this.horde = payload.x_horde;
      for (const choice of payload.choices || []) {
        const delta = choice.delta || {};
        if (delta.reasoning_content) this.addReasoning(delta.reasoning_content);
        if (delta.content) this.addContent(delta.content);
        if (choice.finish_reason) this.finish = choice.finish_reason;
      }
    }

    note(text, kind = "note") {
      const line = document.createElement("p");
      line.className = kind;
      line.textContent = text;
      if (kind === "error") line.setAttribute("role", "alert");
      this.item.append(line);
      this.item.scrollIntoView({ block: "end" });
    }

    done() {
      this.item.removeAttribute("aria-busy");
      if (this.reasoningBox && this.reasoningBox.dataset.auto) this.reasoningBox.open = false;
    }

    summary() {
      const seconds = (ms) => `${(ms / 1000).toFixed(2)} s`;
      const entries = [["model", "Model", this.model || "—"]];
      if (this.usage) {
        const u = this.usage;
        const reasoning = u.completion_tokens_details && u.completion_tokens_details.reasoning_tokens;
        let tokens = `${u.total_tokens} (${u.prompt_tokens} in, ${u.completion_tokens} out`;
        tokens += reasoning ? `, ${reasoning} reasoning)` : ")";
        if (this.horde && this.horde.estimated_usage) tokens += ", estimated";
        entries.push(["tokens", "Tokens", tokens]);
      }
      if (this.horde) entries.push(["kudos", "Kudos", formatKudos(this.horde.kudos)]);
      if (this.firstToken !== null) entries.push(["first-token", "First token", seconds(this.firstToken - this.started)]);
      entries.push(["total", "Total", seconds(performance.now() - this.started)]);
      const list = document.createElement("dl");
      list.className = "meta";
      for (const [name, label, value] of entries) {
        const pair = document.createElement("div");
        pair.dataset.meta = name;
        const term = document.createElement("dt");
        term.textContent = label;
        const detail = document.createElement("dd");
        detail.textContent = value;
        pair.append(term, detail);
        list.append(pair);
      }
      if (this.horde) {
        list.dataset.requestId = this.horde.request_id;
        list.title = `Request ${this.horde.request_id}`;
      }
      this.item.append(list);
      if (this.finish === "length") this.note("Cut off at the max tokens.");
      this.item.scrollIntoView({ block: "end" });
    }
  }

  function formatKudos(kudos) {
    const value = Number(kudos);
    return Number.isInteger(value) ? String(value) : value.toFixed(2);
  }

  // The front's keep-alive comments while a stream waits: "queued: position 3, estimated
  // wait 40 s", "queued: no eligible worker is online yet", "a worker is generating ...".
  function queueNote(comment) {
    const queued = /^queued: position (\d+), estimated wait (\d+) s$/.exec(comment);
    if (queued) return `Queued: position ${queued[1]}, estimated wait ${queued[2]} s`;
    return comment.charAt(0).toUpperCase() + comment.slice(1);
  }

  // Calls onComment(text) and onData(payload) for each SSE line; resolves at [DONE] or the end.
  async function readEvents(response, onComment, onData) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      const lines = buffer.split(/\r?\n/);
      buffer = lines.pop();
      for (const line of lines) {
        if (line.startsWith(":")) onComment(line.slice(1).trim());
        else if (line.startsWith("data:")) {
          const data = line.slice(5).trim();
          if (data === "[DONE]") { reader.cancel().catch(() => {}); return; }
          onData(JSON.parse(data));
        }
      }
    }
  }

  function setRunning(on) {
    ui.send.hidden = on;
    ui.stop.hidden = !on;
    if (!on && document.activeElement === document.body) ui.prompt.focus();
  }

  async function send(text) {
    const userItem = addMessage(S.roles.user, text);
    const body = requestBody(text);
    const reply = new Reply(addMessage(S.roles.assistant, ""));
    const controller = new AbortController();
    const waitedFrom = Date.now();
    let waiting = "Sending…";
    const tick = () => {
      if (reply.firstToken !== null) { ui.status.textContent = "Receiving the reply…"; return; }
      ui.status.textContent = `${waiting} (${Math.round((Date.now() - waitedFrom) / 1000)} s)`;
    };
    const clock = setInterval(tick, 1000);
    running = { controller };
    setRunning(true);
    tick();
    let failed = null;
    try {
      const response = await fetch(S.routes.chat, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream", ...authHeaders() },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!response.ok) throw await apiError(response);
      waiting = "Waiting for a worker…";
      tick();
      await readEvents(
        response,
        (comment) => { waiting = queueNote(comment); tick(); },
        (payload) => {
          if (payload.error) throw { message: payload.error.message, code: payload.error.code || payload.error.type };
          const before = reply.firstToken;
          reply.chunk(payload);
          if (before === null && reply.firstToken !== null) tick();
        },
      );
    } catch (error) {
      failed = error;
    } finally {
      controller.abort();  // after [DONE] or an error event: let the connection go
      clearInterval(clock);
      running = null;
      setRunning(false);
      reply.done();
    }
    if (failed && failed.name === "AbortError") {
      ui.status.textContent = "Stopped.";
      reply.note("Stopped: the request was cancelled.");
      if (reply.content) history.push({ role: S.roles.user, content: text }, { role: S.roles.assistant, content: reply.content });
      return;
    }
    if (failed) {
      const message = failed.message !== undefined ? describeError(failed) : String(failed);
      const shown = failed instanceof TypeError ? `Could not reach the front: ${message}` : message;
      ui.status.textContent = "The request failed.";
      reply.note(shown, "error");
      userItem.classList.add("failed");
      return;
    }
    ui.status.textContent = "";
    reply.summary();
    history.push({ role: S.roles.user, content: text }, { role: S.roles.assistant, content: reply.content });
  }

  function stop() {
    if (running) running.controller.abort();
  }

  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = ui.prompt.value.trim();
    if (!text || running) return;
    if (!ui.model.value) {
      ui.status.textContent = "No model to send to: Refresh the models once a worker is online.";
      return;
    }
    ui.prompt.value = "";
    send(text);
  });
  ui.prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      ui.composer.requestSubmit();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && running) stop();
  });
  ui.stop.addEventListener("click", () => { stop(); ui.prompt.focus(); });

  loadModels();
})();
