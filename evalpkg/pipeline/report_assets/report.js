// The instance table of a report: filters over the compact rows embedded in the page, pages of
// PAGE_ROWS, and each trajectory's drill-down read from its chunk file when its row is opened. Chunks
// are scripts calling evalpkgReport.chunk(...), not JSON to fetch(): browsers refuse fetch() of file://.
"use strict";
(function () {
  const PAGE_ROWS = 100;
  const data = JSON.parse(document.getElementById("instance-table").textContent);
  // a row's fields, in report_views.ROW_FIELDS' order; the instance id is its task's id and the rest
  const [TASK, ID_REST, TYPE, DIFFICULTY, OUTCOME, STOP, CLUSTER, CHUNK] = [0, 1, 2, 3, 4, 5, 6, 7];
  const ids = data.rows.map((r) => data.tasks[r[TASK]] + r[ID_REST]);
  const searched = ids.map((id) => id.toLowerCase());
  const everyRow = data.rows.map((_, i) => i);
  const loaded = new Map(); // chunk -> Map(instance id -> trajectory view)
  const waiting = new Map(); // chunk -> callbacks waiting for it
  const $ = (id) => document.getElementById(id);
  let matched = everyRow; // positions in data.rows
  let page = 0;

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function addScript(src, onError) {
    const s = document.createElement("script");
    s.src = src;
    s.onerror = onError;
    document.head.appendChild(s);
  }

  window.evalpkgReport = {
    chunk(file) {
      const views = new Map(file.trajectories.map((t) => [t.instance_id, t]));
      loaded.set(file.chunk, views);
      for (const done of waiting.get(file.chunk) || []) done(views, null);
      waiting.delete(file.chunk);
    },
    table(name, html) {
      $("full-" + name).innerHTML = html; // HTML the report's writer escaped, as the page's own tables
    },
  };

  function withChunk(chunk, done) {
    if (loaded.has(chunk)) return done(loaded.get(chunk), null);
    if (waiting.has(chunk)) return waiting.get(chunk).push(done);
    waiting.set(chunk, [done]);
    const src = `${data.files}/trajectories-${String(chunk).padStart(4, "0")}.js`;
    addScript(src, () => {
      for (const callback of waiting.get(chunk) || []) callback(null, src);
      waiting.delete(chunk);
    });
  }

  function fillSelect(id, names, anyLabel) {
    const select = $(id);
    select.appendChild(new Option(anyLabel, ""));
    names.forEach((name, i) => select.appendChild(new Option(name, String(i))));
    if (id === "f-cluster") select.appendChild(new Option("no cluster", "-1"));
  }

  function applyFilters() {
    const text = $("f-text").value.trim().toLowerCase();
    const wanted = [
      [TYPE, $("f-type").value],
      [DIFFICULTY, $("f-difficulty").value],
      [OUTCOME, $("f-outcome").value],
      [CLUSTER, $("f-cluster").value],
    ].filter(([, v]) => v !== "");
    matched = everyRow.filter(
      (i) => (!text || searched[i].includes(text)) && wanted.every(([col, v]) => data.rows[i][col] === Number(v)),
    );
    page = 0;
    render();
  }

  function render() {
    const body = $("instances").tBodies[0];
    body.replaceChildren();
    for (const i of matched.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS)) {
      const r = data.rows[i];
      const tr = el("tr", undefined, "row");
      tr.dataset.instance = ids[i];
      const outcome = data.outcomes[r[OUTCOME]];
      tr.append(
        el("td", ids[i]),
        el("td", data.types[r[TYPE]]),
        el("td", data.difficulties[r[DIFFICULTY]]),
        el("td", outcome, { correct: "ok", incorrect: "bad", error: "error" }[outcome]),
        el("td", data.stop_reasons[r[STOP]]),
        el("td", r[CLUSTER] < 0 ? "" : data.clusters[r[CLUSTER]]),
      );
      tr.addEventListener("click", () => toggle(tr, ids[i], r[CHUNK]));
      body.appendChild(tr);
    }
    const pages = Math.max(1, Math.ceil(matched.length / PAGE_ROWS));
    $("f-count").textContent = `${matched.length} of ${data.rows.length} instances`;
    $("p-at").textContent = `page ${page + 1} of ${pages}`;
    $("p-prev").disabled = page === 0;
    $("p-next").disabled = page + 1 >= pages;
  }

  function toggle(tr, id, chunk) {
    const next = tr.nextElementSibling;
    if (next && next.classList.contains("drill-row")) return next.remove();
    const row = el("tr", undefined, "drill-row");
    const cell = el("td", "loading…", "drill");
    cell.colSpan = 6;
    row.appendChild(cell);
    tr.after(row);
    withChunk(chunk, (views, failedSrc) => {
      if (failedSrc) {
        cell.textContent = `Could not read ${failedSrc}: the report's folder must stay beside the page.`;
      } else {
        cell.replaceChildren(drillDown(views.get(id)));
      }
    });
  }

  function labelled(label, text, cls) {
    const p = el("p", undefined, cls);
    p.append(el("b", label + " "), document.createTextNode(text));
    return p;
  }

  function drillDown(t) {
    const box = el("div");
    box.append(
      labelled("Q:", t.question),
      labelled("Answer:", t.answer),
      el("pre", t.final_sql || "(no SQL)", "final-sql"),
      labelled("Status:", `${t.status}, stopped by ${t.stop_reason}`),
    );
    if (t.error_text) box.append(labelled("Errors:", t.error_text, "bad"));
    if (t.world_misses.length) box.append(labelled("Misses in reference worlds:", t.world_misses.join("; ")));
    if (t.state !== null) box.append(labelled("State:", t.state));
    if (t.state_scores) {
      box.append(labelled("State scores:", Object.entries(t.state_scores).map(([k, v]) => `${k} ${v}`).join(", ")));
    }
    for (const step of t.steps) box.append(stepView(step));
    return box;
  }

  function stepView(step) {
    const box = el("div", undefined, "step");
    box.append(el("div", `step ${step.index}`, "muted"));
    if (step.model_text) box.append(el("pre", step.model_text));
    if (step.parse_error) box.append(labelled("Parse error:", step.parse_error, "bad"));
    for (const c of step.calls) {
      const details = el("details");
      details.append(el("summary", `${c.name} ${c.ok ? "ok" : "error"}`, c.ok ? "" : "bad"));
      details.append(el("pre", `${c.arguments}\n→ ${c.result}`));
      if (c.sql) details.append(el("pre", c.sql, "call-sql"));
      box.append(details);
    }
    if (step.user_message) box.append(labelled("Clinician:", step.user_message));
    return box;
  }

  fillSelect("f-type", data.types, "every type");
  fillSelect("f-difficulty", data.difficulties, "every difficulty");
  fillSelect("f-outcome", data.outcomes, "every outcome");
  fillSelect("f-cluster", data.clusters, "every cluster");
  for (const id of ["f-type", "f-difficulty", "f-outcome", "f-cluster"]) $(id).addEventListener("change", applyFilters);
  $("f-text").addEventListener("input", applyFilters);
  $("p-prev").addEventListener("click", () => { page -= 1; render(); });
  $("p-next").addEventListener("click", () => { page += 1; render(); });
  for (const button of document.querySelectorAll("button[data-table]")) {
    button.addEventListener("click", () => {
      button.disabled = true;
      addScript(`${data.files}/table-${button.dataset.table}.js`, () => {
        button.textContent = "could not read the full table: the report's folder must stay beside the page";
      });
    });
  }
  render();
})();
