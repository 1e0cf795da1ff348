// The horde dashboard: the horde as its public routes show it, read again every few seconds.
// Reads only public routes (no API key, no prompt): the models and workers status, and,
// where this horde serves them, upstream's text stats and performance routes and the
// horde's per-minute history of the past hour (/stats/text/history), which the charts draw.
"use strict";

(() => {
  const S = JSON.parse(document.getElementById("settings").textContent);
  const R = S.routes;
  const REFRESH_MS = 5000;
  const HOUR_MS = 3600 * 1000;
  const MAX_EVENTS = 50;
  const $ = (id) => document.getElementById(id);
  const number = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  const ui = {
    updated: $("updated"), pause: $("pause"), problems: $("problems"), cards: $("cards"),
    models: document.querySelector("#models tbody"), workers: document.querySelector("#workers tbody"),
    events: $("events"), chartsNote: $("charts-note"),
    requestsChart: $("requests-chart"), tokensChart: $("tokens-chart"),
  };
  let known = null;  // worker id -> what the last read showed, for the events list
  let kudosAtOpen = null;
  let paused = false;
  let timer = null;

  if (R.docs) $("docs-link").href = R.docs;
  else $("docs-link").hidden = true;

  async function read(name) {
    if (!R[name]) return { missing: true };
    try {
      const response = await fetch(R[name], { cache: "no-store" });
      if (!response.ok) {
        let message = `${response.status} ${response.statusText}`;
        try { message = (await response.json()).message || message; } catch (_) { /* keep */ }
        return { error: `${R[name]}: ${message}` };
      }
      return { data: await response.json() };
    } catch (error) {
      return { error: `${R[name]}: ${error.message}` };
    }
  }

  const plural = (count, noun) => `${fmt(count)} ${noun}${count === 1 ? "" : "s"}`;
  const fmt = (value) => (value === undefined || value === null ? "—" : number.format(value));

  function duration(seconds) {
    if (seconds === undefined || seconds === null) return "—";
    if (seconds < 90) return `${Math.round(seconds)} s`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
    return `${number.format(seconds / 3600)} h`;
  }

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function emptyRow(tbody, columns, text) {
    const row = document.createElement("tr");
    const td = cell(text, "empty");
    td.colSpan = columns;
    row.append(td);
    tbody.replaceChildren(row);
  }

  // ---- figures ---------------------------------------------------------------------------

  function threadNote(performance, online) {
    const threads = performance.text_thread_count ?? (online ? online.reduce((sum, w) => sum + (w.threads || 0), 0) : null);
    return threads === null ? "" : plural(threads, "thread");
  }

  function renderCards(workers, totals, performance) {
    const online = workers ? workers.filter((w) => w.online) : null;
    const earned = workers ? workers.reduce((sum, w) => sum + (Number(w.kudos_rewards) || 0), 0) : null;
    if (earned !== null && kudosAtOpen === null) kudosAtOpen = earned;
    const p = performance || {};
    const t = totals || {};
    const period = (name, key) => (t[name] ? t[name][key] : undefined);
    const cards = [
      ["workers-online", "Workers online", p.text_worker_count ?? (online ? online.length : null),
        threadNote(p, online)],
      ["queued-requests", "Queued requests", p.queued_text_requests, p.queued_tokens !== undefined ? `${fmt(p.queued_tokens)} tokens` : ""],
      ["requests-minute", "Requests, last minute", period("minute", "requests"), t.hour ? `${fmt(t.hour.requests)} last hour` : ""],
      ["tokens-minute", "Tokens, last minute", period("minute", "tokens"), t.hour ? `${fmt(t.hour.tokens)} last hour` : ""],
      ["requests-day", "Requests today", period("day", "requests"), t.total ? `${fmt(t.total.requests)} in all` : ""],
      ["kudos-earned", "Kudos earned by workers", earned,
        earned !== null ? `+${fmt(earned - kudosAtOpen)} since this page opened` : ""],
    ];
    ui.cards.replaceChildren(...cards.map(([name, label, value, small]) => {
      const pair = document.createElement("div");
      pair.dataset.figure = name;
      const term = document.createElement("dt");
      term.textContent = label;
      const detail = document.createElement("dd");
      detail.textContent = fmt(value);
      if (small) {
        const note = document.createElement("small");
        note.textContent = small;
        detail.append(note);
      }
      pair.append(term, detail);
      return pair;
    }));
  }

  function renderModels(models, modelStats) {
    if (!models) return;
    if (!models.length) { emptyRow(ui.models, 9, "No worker is online."); return; }
    const stats = modelStats || {};
    ui.models.replaceChildren(...models.map((m) => {
      const row = document.createElement("tr");
      row.dataset.model = m.name;
      row.append(
        cell(m.name), cell(fmt(m.count), "num"),
        cell(m.performance !== undefined ? `${fmt(m.performance)} tokens/s` : "—", "num"),
        cell(fmt(m.jobs), "num"), cell(fmt(m.queued), "num"),
        cell(m.jobs ? duration(m.oldest_wait) : "—", "num"), cell(duration(m.eta), "num"),
        cell(fmt(stats.day ? stats.day[m.name] ?? 0 : undefined), "num"),
        cell(fmt(stats.total ? stats.total[m.name] ?? 0 : undefined), "num"),
      );
      return row;
    }));
  }

  function workerState(w) {
    if (!w.online) return ["offline", "offline"];
    if (w.maintenance_mode) return ["maintenance", "offline"];
    return ["online", "online"];
  }

  function renderWorkers(workers) {
    if (!workers) return;
    if (!workers.length) { emptyRow(ui.workers, 10, "No worker has joined this horde yet."); return; }
    const ordered = [...workers].sort((a, b) => Number(b.online) - Number(a.online) || a.name.localeCompare(b.name));
    ui.workers.replaceChildren(...ordered.map((w) => {
      const row = document.createElement("tr");
      row.dataset.worker = w.name;
      const [state, className] = workerState(w);
      const name = cell(w.name);
      name.title = w.id;
      row.append(
        name, cell(state, className), cell((w.models || []).join(", ")), cell(w.performance || "—"),
        cell(fmt(w.threads), "num"), cell(`${fmt(w.max_context_length)} / ${fmt(w.max_length)}`, "num"),
        cell(fmt(w.requests_fulfilled), "num"), cell(fmt(w.uncompleted_jobs), "num"),
        cell(fmt(w.kudos_rewards), "num"), cell(duration(w.uptime), "num"),
      );
      return row;
    }));
  }

  // ---- events: what changed between two reads of the workers ---------------------------

  function addEvent(text) {
    const item = document.createElement("li");
    const time = document.createElement("time");
    const now = new Date();
    time.dateTime = now.toISOString();
    time.textContent = now.toLocaleTimeString();
    item.append(time, text);
    ui.events.prepend(item);
    while (ui.events.children.length > MAX_EVENTS) ui.events.lastElementChild.remove();
  }

  function noteChanges(workers) {
    if (!workers) return;
    const now = new Map(workers.map((w) => [w.id, w]));
    if (known) {
      for (const [id, w] of now) {
        const before = known.get(id);
        if (!before) { addEvent(`${w.name} joined${w.online ? " and is online" : ""}.`); continue; }
        const dropped = (w.uncompleted_jobs || 0) - (before.uncompleted_jobs || 0);
        if (dropped > 0) addEvent(`${w.name} left ${plural(dropped, "job")} uncompleted (a fault).`);
        if (before.online && !w.online) addEvent(`${w.name} went offline.`);
        if (!before.online && w.online) addEvent(`${w.name} came online.`);
        if (!before.maintenance_mode && w.maintenance_mode) addEvent(`${w.name} went into maintenance.`);
      }
    }
    known = now;
  }

  // ---- charts --------------------------------------------------------------------------

  const SVG = "http://www.w3.org/2000/svg";
  const BOX = { width: 600, height: 190, left: 44, right: 10, top: 12, bottom: 24 };
  // drawn at the plot's own width, so its labels keep their size on a phone

  function svg(tag, attributes, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function niceMax(value) {
    if (value <= 1) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    return [1, 2, 2.5, 5, 10].map((step) => step * power).find((top) => top >= value);
  }

  function drawChart(figure, key, label, points, missing) {
    const plot = figure.querySelector(".plot");
    const values = points.map((p) => Number(p[key]) || 0);
    const latest = values.length ? values[values.length - 1] : null;
    const total = values.reduce((sum, v) => sum + v, 0);
    figure.dataset.latest = latest ?? "";
    figure.dataset.points = values.length;
    figure.dataset.total = values.length ? total : "";
    let caption = figure.querySelector(".latest");
    if (!caption) {
      caption = document.createElement("span");
      caption.className = "latest";
      figure.querySelector("figcaption").append(caption);
    }
    caption.textContent = latest === null ? "" : `last minute ${fmt(latest)}, hour ${fmt(total)}`;
    const { height, left, right, top, bottom } = BOX;
    const width = Math.max(240, Math.round(plot.clientWidth || BOX.width));
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
    const innerW = width - left - right;
    const innerH = height - top - bottom;
    const peak = niceMax(Math.max(0, ...values));
    // each point at its minute's end, the last one (the horde's now) at the right edge
    const end = points.length ? Date.parse(points[points.length - 1].until) : 0;
    const x = (t) => left + (1 - (end - t) / HOUR_MS) * innerW;
    const y = (v) => top + innerH - (v / peak) * innerH;
    for (const v of [0, peak / 2, peak]) {
      chart.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: y(v), y2: y(v) }));
      chart.append(svg("text", { class: "label", x: left - 6, y: y(v) + 4, "text-anchor": "end" }, fmt(v)));
    }
    for (const [minutes, anchor] of [[60, "start"], [30, "middle"], [0, "end"]]) {
      chart.append(svg("text", { class: "label", x: x(end - minutes * 60000), y: height - 6, "text-anchor": anchor },
        minutes ? `${minutes} min ago` : "now"));
    }
    if (missing) {
      chart.append(svg("text", { class: "empty", x: left + innerW / 2, y: top + innerH / 2, "text-anchor": "middle" }, missing));
    } else if (points.length) {
      const coords = points.map((p, i) => `${x(Date.parse(p.until)).toFixed(1)},${y(values[i]).toFixed(1)}`);
      const first = coords[0].split(",")[0];
      const last = coords[coords.length - 1].split(",");
      chart.append(svg("path", { class: "area", d: `M${first},${y(0)} L${coords.join(" L")} L${last[0]},${y(0)} Z` }));
      chart.append(svg("polyline", { class: "line", points: coords.join(" ") }));
      chart.append(svg("circle", { class: "dot", cx: last[0], cy: last[1], r: 3.5 }));
    }
    chart.setAttribute("aria-label", missing || (latest === null ? `${label}: not read yet`
      : `${label} over the last hour, minute by minute: ${fmt(total)} in all, highest ${fmt(Math.max(...values))}, last minute ${fmt(latest)}`));
    plot.replaceChildren(chart);
  }

  function renderCharts(historyRead) {
    const missing = historyRead.missing ? "This horde serves no text history route" : null;
    if (!missing && !historyRead.data) return;  // a failed read keeps the charts drawn before
    const points = Array.isArray(historyRead.data) ? historyRead.data : [];
    drawChart(ui.requestsChart, "requests", "Requests per minute", points, missing);
    drawChart(ui.tokensChart, "tokens", "Tokens per minute", points, missing);
    ui.chartsNote.textContent = missing ? ""
      : "Each point is the text jobs that ended in one minute (tokens: their requested length), as the horde counts them.";
  }

  // ---- the loop ------------------------------------------------------------------------

  async function refresh() {
    const names = ["models", "workers", "totals", "history", "model_stats", "performance"];
    const results = await Promise.all(names.map(read));
    const reads = Object.fromEntries(names.map((name, i) => [name, results[i]]));
    const problems = results.filter((r) => r.error).map((r) => r.error);
    ui.problems.hidden = problems.length === 0;
    ui.problems.textContent = problems.length ? `Could not read ${problems.join("; ")}` : "";
    renderCards(reads.workers.data, reads.totals.data, reads.performance.data);
    renderModels(reads.models.data, reads.model_stats.data);
    renderWorkers(reads.workers.data);
    noteChanges(reads.workers.data);
    renderCharts(reads.history);
    ui.updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  }

  async function loop() {
    clearTimeout(timer);
    if (!paused && !document.hidden) await refresh();
    timer = setTimeout(loop, REFRESH_MS);
  }

  ui.pause.addEventListener("click", () => {
    paused = !paused;
    ui.pause.setAttribute("aria-pressed", String(paused));
    ui.pause.textContent = paused ? "Resume" : "Pause";
    if (!paused) loop();
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden && !paused) loop(); });
  loop();
})();
