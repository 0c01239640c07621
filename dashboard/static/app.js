// evalfleet dashboard: plain JS. Live figures arrive over SSE (fed by KV watches); results and the
// drill-down are fetched from the server (PostgreSQL, object store) on demand.

const $ = (id) => document.getElementById(id);
const COLORS = { c: "#2ca02c", f: "#d62728", s: "#e6a700", r: "#1f77b4", p: "#d9d9d9" };
const NAMES = { c: "completed", f: "failed", s: "skipped", r: "running", p: "pending" };

const grid = { ids: [], st: [], attempts: [], cost: [], index: new Map(), size: 8, cols: 100 };
// What the filters keep: a cell's status, its harness / model (cell ids start `<harness>__<model>__`), a text.
const filter = { status: "", harness: "", model: "", text: "" };
let groups = [];
window.__filter = filter; // read by the browser test

function cellMatches(i) {
  const id = grid.ids[i];
  if (filter.status && grid.st[i] !== filter.status) return false;
  if (filter.text && !id.includes(filter.text)) return false;
  if (!filter.harness && !filter.model) return true;
  return groups.some(
    (g) =>
      (!filter.harness || g.harness === filter.harness) &&
      (!filter.model || g.model === filter.model) &&
      id.startsWith(`${g.harness}__${g.model}__`),
  );
}
const groupShown = (g) =>
  (!filter.harness || g.harness === filter.harness) && (!filter.model || g.model === filter.model);
window.__grid = grid; // read by the browser test
let source = null;
let current = null;
let samples = [];
let reportTimer = null;

const usd = (nano) => {
  if (nano === null || nano === undefined) return "—";
  const v = nano / 1e9;
  return `$${Math.abs(v) >= 100 ? v.toFixed(2) : v.toFixed(4)}`;
};
const pct = (x) => (x === null || x === undefined ? "—" : `${(x * 100).toFixed(1)}%`);
const int = (x) => Number(x || 0).toLocaleString("en-US");
const dur = (ms) => {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
  if (ms < 10000) return `${(ms / 1000).toFixed(ms < 1000 ? 2 : 1)}s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
};
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
function setNano(el, nano) {
  el.textContent = usd(nano);
  el.dataset.nano = String(nano);
}

// ---- runs ---------------------------------------------------------------------------------------------------

function renderRuns(runs) {
  const nav = $("runs");
  nav.innerHTML = runs
    .map(
      (r) =>
        `<a href="#${encodeURIComponent(r.run)}" class="${r.run === current ? "active" : ""}">${esc(r.run)}</a>`,
    )
    .join("");
  $("empty").hidden = runs.length > 0;
}

function pickRun(runs) {
  const want = decodeURIComponent(location.hash.slice(1));
  if (want && runs.some((r) => r.run === want)) return want;
  return runs[0]?.run ?? null;
}

async function start() {
  const runs = await (await fetch("/api/runs")).json();
  const run = pickRun(runs);
  renderRuns(runs);
  $("conn").textContent = run ? "connecting…" : "waiting for a run";
  if (run) open(run);
  // No run yet: look again until one is submitted (a stream needs a run to follow).
  else setTimeout(() => start().catch(showError), 3000);
}
window.addEventListener("hashchange", () => {
  const run = decodeURIComponent(location.hash.slice(1));
  if (run && run !== current) open(run);
});

function open(run) {
  current = run;
  samples = [];
  if (source) source.close();
  $("run").hidden = false;
  $("run-name").textContent = run;
  source = new EventSource(`/api/runs/${encodeURIComponent(run)}/stream`);
  source.addEventListener("snapshot", (ev) => onSnapshot(JSON.parse(ev.data)));
  source.addEventListener("delta", (ev) => onDelta(JSON.parse(ev.data)));
  source.onopen = () => {
    $("conn").textContent = "live";
  };
  source.onerror = () => {
    $("conn").textContent = "reconnecting…";
  };
  clearInterval(reportTimer);
  loadRunChoices().catch(showError);
  refreshReport();
  reportTimer = setInterval(refreshReport, 15000);
}

// ---- live summary -------------------------------------------------------------------------------------------

function renderSummary(s) {
  if (!s) return;
  const phase = $("run-phase");
  const wasFinished = phase.textContent === "finished";
  phase.textContent = s.phase;
  phase.className = `badge ${s.phase}`;
  $("run-message").textContent = s.message;
  for (const k of ["completed", "failed", "skipped", "running", "pending"])
    $(`live-${k}`).textContent = int(s[k]);
  $("live-total-cells").textContent = int(s.totalCells);
  $("live-infra").textContent = int(s.infraFailures ?? 0);
  const total = Math.max(1, s.totalCells);
  $("cells-bar").innerHTML = ["completed", "failed", "skipped", "running"]
    .map((k) => `<div class="${k}-bg" style="width:${(100 * s[k]) / total}%"></div>`)
    .join("");
  setNano($("live-billable"), s.billableCostNanoUsd);
  setNano($("live-total-cost"), s.totalCostNanoUsd);
  const cap = s.budgetNanoUsd;
  $("live-cap").textContent = cap === null ? "no cap" : usd(cap);
  const used = cap ? Math.min(100, (100 * s.billableCostNanoUsd) / cap) : 0;
  $("spend-bar").innerHTML = cap
    ? `<div class="${s.billableCostNanoUsd > cap ? "over" : "under"}" style="width:${used}%"></div>`
    : "";
  const t = s.tokens;
  $("live-tokens").innerHTML = [
    ["input", t.input],
    ["output", t.output],
    ["cache read", t.cacheRead],
    ["cache write", t.cacheWrite],
    ["reasoning", t.reasoning],
  ]
    .map(([k, v]) => `<span>${k}</span><b>${int(v)}</b>`)
    .join("");
  $("live-wait").textContent = dur(s.pacerWaitMs);
  $("live-wait-cells").textContent = `over ${int(s.cellsWithKeys)} cells`;
  const fleet = Object.entries(s.fleet);
  $("live-fleet").innerHTML = fleet.length
    ? fleet.map(([p, n]) => `<span>${esc(p)}</span><b>${int(n)}</b>`).join("")
    : '<span class="muted">—</span>';
  const done = s.completed + s.failed + s.skipped;
  samples.push({ at: Date.now(), done });
  const first = samples.find((x) => x.at >= Date.now() - 120000) ?? samples[0];
  // A rate needs a few seconds of history: two samples milliseconds apart say nothing.
  const span = (Date.now() - first.at) / 1000;
  const rate = span >= 5 ? (done - first.done) / span : 0;
  const left = s.pending + s.running;
  const terminal = ["finished", "cancelled", "rejected"].includes(s.phase);
  $("live-eta").textContent = terminal ? "done" : rate > 0 ? dur((left / rate) * 1000) : "—";
  $("live-rate").textContent = rate > 0 ? `${rate.toFixed(2)} cells/s` : "";
  if (s.phase === "finished" && !wasFinished) refreshReport();
}

function renderPacer(pools) {
  if (!pools) return;
  $("pacer").tBodies[0].innerHTML = pools.length
    ? pools
        .map(
          (p) =>
            `<tr><td>${esc(p.pool)}</td><td>${p.ownerAlive ? "alive" : "none"}</td><td>${esc(
              Object.entries(p.limits)
                .map(([k, v]) => `${k}=${v}`)
                .join(" ") || "—",
            )}</td><td>${p.pausedForMs > 0 ? dur(p.pausedForMs) : "no"}</td><td>${int(p.settledCalls)}</td><td>${int(
              p.outputTokensP95,
            )}</td></tr>`,
        )
        .join("")
    : '<tr><td colspan="6" class="muted">no pacer pools yet</td></tr>';
}

// ---- grid (canvas: one square per cell, redrawn per changed cell) --------------------------------------------

function layout() {
  const n = grid.ids.length;
  grid.size = n <= 200 ? 22 : n <= 1000 ? 14 : n <= 4000 ? 9 : n <= 10000 ? 7 : 5;
  const width = $("grid-wrap").clientWidth - 14;
  grid.cols = Math.max(1, Math.floor(width / grid.size));
  const canvas = $("grid");
  canvas.width = grid.cols * grid.size;
  canvas.height = Math.max(1, Math.ceil(n / grid.cols)) * grid.size;
  drawAll();
}

function drawCell(ctx, i) {
  const g = grid.size;
  const x = (i % grid.cols) * g;
  const y = Math.floor(i / grid.cols) * g;
  ctx.clearRect(x, y, g, g);
  ctx.globalAlpha = cellMatches(i) ? 1 : 0.12;
  ctx.fillStyle = COLORS[grid.st[i]] ?? COLORS.p;
  ctx.fillRect(x, y, g - 1, g - 1);
  ctx.globalAlpha = 1;
}

function drawAll() {
  const ctx = $("grid").getContext("2d");
  ctx.clearRect(0, 0, $("grid").width, $("grid").height);
  let shown = 0;
  for (let i = 0; i < grid.ids.length; i++) {
    drawCell(ctx, i);
    if (cellMatches(i)) shown++;
  }
  $("grid-note").textContent = `(${int(grid.ids.length)} cells; click one for its attempt)`;
  const filtering = filter.status || filter.harness || filter.model || filter.text;
  $("f-note").textContent = filtering ? `${int(shown)} of ${int(grid.ids.length)} cells match` : "";
}

function onSnapshot(d) {
  renderRuns(d.runs);
  renderSummary(d.summary);
  renderPacer(d.pacer);
  grid.ids = d.cells.ids;
  grid.st = d.cells.st.split("");
  grid.attempts = d.cells.attempts;
  grid.cost = d.cells.cost;
  grid.index = new Map(grid.ids.map((id, i) => [id, i]));
  layout();
}

function onDelta(d) {
  if (d.runs) renderRuns(d.runs);
  if (d.summary) renderSummary(d.summary);
  if (d.pacer) renderPacer(d.pacer);
  if (!d.cells) return;
  const ctx = $("grid").getContext("2d");
  let grew = false;
  for (const [id, st, attempt, cost] of d.cells) {
    let i = grid.index.get(id);
    if (i === undefined) {
      i = grid.ids.length;
      grid.ids.push(id);
      grid.index.set(id, i);
      grew = true;
    }
    grid.st[i] = st;
    grid.attempts[i] = attempt;
    grid.cost[i] = cost;
    if (!grew) drawCell(ctx, i);
  }
  if (grew) layout();
}

function cellAt(ev) {
  const r = $("grid").getBoundingClientRect();
  const col = Math.floor((ev.clientX - r.left) / grid.size);
  const row = Math.floor((ev.clientY - r.top) / grid.size);
  const i = row * grid.cols + col;
  return col < grid.cols && i >= 0 && i < grid.ids.length ? i : -1;
}
$("grid").addEventListener("mousemove", (ev) => {
  const i = cellAt(ev);
  const tip = $("tip");
  if (i < 0) {
    tip.hidden = true;
    return;
  }
  tip.hidden = false;
  tip.textContent = `${grid.ids[i]} · ${NAMES[grid.st[i]]} · attempt ${grid.attempts[i]} · ${usd(grid.cost[i])}`;
  tip.style.left = `${ev.clientX + 14}px`;
  tip.style.top = `${ev.clientY + 10}px`;
});
$("grid").addEventListener("mouseleave", () => {
  $("tip").hidden = true;
});
$("grid").addEventListener("click", (ev) => {
  const i = cellAt(ev);
  if (i >= 0) drill(grid.ids[i]).catch(showError);
});
window.addEventListener("resize", () => grid.ids.length && layout());

for (const [id, key] of [
  ["f-status", "status"],
  ["f-harness", "harness"],
  ["f-model", "model"],
  ["f-text", "text"],
]) {
  $(id).addEventListener("input", () => {
    filter[key] = $(id).value.trim();
    drawAll();
    if (lastReport) renderResults(lastReport);
    if (lastMatrix) renderMatrix(lastMatrix);
  });
}

function fillSelect(sel, values) {
  const keep = sel.value;
  sel.innerHTML = `<option value="">any</option>${values.map((v) => `<option value="${esc(v)}">${esc(v)}</option>`).join("")}`;
  sel.value = values.includes(keep) ? keep : "";
}

// ---- results from PostgreSQL ----------------------------------------------------------------------------------

function showError(err) {
  $("conn").textContent = `error: ${err.message}`;
}
/** Results are re-read every 15 s and when the run finishes; a failed read keeps the last table. */
function refreshReport() {
  loadReport().catch(showError);
}

let lastReport = null;
let lastMatrix = null;

async function loadReport() {
  if (!current) return;
  const run = current;
  const res = await fetch(`/api/runs/${encodeURIComponent(run)}/report`);
  if (!res.ok || run !== current) return;
  const r = await res.json();
  lastReport = r;
  groups = r.groups.map((g) => ({ harness: g.harness, model: g.model }));
  fillSelect($("f-harness"), [...new Set(groups.map((g) => g.harness))]);
  fillSelect($("f-model"), [...new Set(groups.map((g) => g.model))]);
  const t = r.totals;
  $("db-totals").innerHTML =
    `${int(t.cells)} attempt rows, <b id="db-resolved">${t.resolved}</b>/${t.scored} resolved · spent ` +
    `<b id="db-total-cost" data-nano="${t.costNanoUsd}">${usd(t.costNanoUsd)}</b> (billable ` +
    `<b id="db-billable" data-nano="${t.billableNanoUsd}">${usd(t.billableNanoUsd)}</b>, on retried attempts ` +
    `<b id="db-retried" data-nano="${t.retriedSpendNanoUsd}">${usd(t.retriedSpendNanoUsd)}</b>) over ` +
    `<b id="db-calls">${t.calls}</b> calls · <b id="db-infra">${int(t.infraFailures ?? 0)}</b> infrastructure ` +
    `failures (${r.runOptions?.infraFailures === "as_failures" ? "counted as failures" : "out of the resolved rate"})` +
    (r.runOptions?.unvalidated ? ' · <b class="over">UNVALIDATED</b> (submitted with --unvalidated)' : "");
  renderResults(r);
  const stamp = Date.now();
  const base = `/api/runs/${encodeURIComponent(run)}/plots`;
  $("plot-cost").src = `${base}/resolved-vs-cost.svg?t=${stamp}`;
  $("plot-spend").src = `${base}/spend-over-time.svg?t=${stamp}`;
  const m = await fetch(`/api/runs/${encodeURIComponent(run)}/matrix`);
  if (m.ok && run === current) {
    lastMatrix = await m.json();
    renderMatrix(lastMatrix);
  }
  if (grid.ids.length) drawAll();
}

const ciText = (ci) => (ci ? ` [${pct(ci.low)}, ${ci.high === null ? "∞" : pct(ci.high)}]` : "");

function renderResults(r) {
  $("report").tBodies[0].innerHTML = r.groups
    .filter(groupShown)
    .map((g) => {
      const errs = Object.entries(g.errorClasses)
        .map(([k, v]) => `${k}:${v}`)
        .join(" ");
      return `<tr><td>${esc(g.harness)}</td><td>${esc(g.model)}</td><td>${int(g.cells)}</td><td>${g.resolved}/${g.scored} ${pct(
        g.resolvedRate,
      )}${ciText(g.resolvedCi95)}</td><td>${pct(g.passAt1)}</td><td>${pct(g.passAtK.value)}${ciText(
        g.passAtK.ci95,
      )}</td><td>${pct(g.passHatK?.value ?? null)}</td><td>${pct(g.flip?.rate ?? null)}</td><td data-nano="${
        g.costNanoUsd
      }">${usd(g.costNanoUsd)}</td><td>${usd(g.billableNanoUsd)}</td><td>${usd(g.retriedSpendNanoUsd)}</td><td>${usd(
        g.costPerResolvedNanoUsd,
      )}</td><td>${dur(g.medianLatencyMs)}</td><td>${esc(errs || "—")}</td></tr>`;
    })
    .join("");
  const boot = r.groups.some((g) => g.resolvedCiMethod === "task-bootstrap");
  $("ci-note").textContent = `k = ${r.k}. 95% intervals: ${
    boot
      ? "task-clustered bootstrap (whole tasks resampled, seeded): repeats of one task are not independent"
      : "Wilson (one attempt per task)"
  }. pass^k: all k repeats resolve. Flip: how often two repeats of a task disagree.`;
}

function renderMatrix(m) {
  const cols = m.groups.map((g, i) => ({ g, i })).filter(({ g }) => groupShown(g));
  $("matrix").tHead.innerHTML = `<tr><th>Task</th>${cols
    .map(({ g }) => `<th>${esc(g.harness)}<br><span class="muted">${esc(g.model)}</span></th>`)
    .join("")}</tr>`;
  $("matrix").tBodies[0].innerHTML = m.tasks
    .map((task, ti) => ({ task, ti }))
    .filter(({ task }) => !filter.text || task.includes(filter.text))
    .map(
      ({ task, ti }) =>
        `<tr><td>${esc(task)}</td>${cols
          .map(({ i }) => {
            const c = m.cells[ti][i];
            if (!c) return '<td class="m muted">—</td>';
            const rate = c.n ? c.c / c.n : null;
            const bg = rate === null ? "#eee" : `hsl(${Math.round(rate * 120)}, 60%, 80%)`;
            return `<td class="m" style="background:${bg}" title="${c.c} of ${c.n} scored resolved${
              c.open ? `, ${c.open} without an outcome yet` : ""
            }">${c.c}/${c.n}${c.open ? ` +${c.open}` : ""}</td>`;
          })
          .join("")}</tr>`,
    )
    .join("");
}

// ---- compare --------------------------------------------------------------------------------------------------

async function loadRunChoices() {
  const res = await fetch("/api/db-runs");
  if (!res.ok) return;
  const runs = (await res.json()).filter((r) => r !== current);
  const sel = $("cmp-b");
  const keep = sel.value;
  sel.innerHTML = `<option value="">this run's own arms</option>${runs.map((r) => `<option value="${esc(r)}">${esc(r)}</option>`).join("")}`;
  sel.value = runs.includes(keep) ? keep : "";
}

const pts = (x) => (x === null || x === undefined ? "—" : `${x >= 0 ? "+" : ""}${(x * 100).toFixed(1)}`);

async function compare() {
  if (!current) return;
  const q = new URLSearchParams({ a: current });
  if ($("cmp-b").value) q.set("b", $("cmp-b").value);
  if ($("cmp-by").value) q.set("by", $("cmp-by").value);
  $("compare").innerHTML = '<p class="muted">comparing…</p>';
  const res = await fetch(`/api/compare?${q}`);
  const r = await res.json();
  if (!res.ok) {
    $("compare").textContent = r.error;
    return;
  }
  $("compare").innerHTML = r.comparisons.length
    ? r.comparisons
        .map((c) => {
          const ci = c.difference.ci95;
          return `<div class="cmp"><b>${esc(c.a.label)}</b> vs <b>${esc(c.b.label)}</b> <span class="muted">paired on ${
            c.pairedTasks
          } task(s)</span><br>resolved ${c.a.resolved}/${c.a.scored} ${pct(c.a.rate)} vs ${c.b.resolved}/${c.b.scored} ${pct(
            c.b.rate,
          )} · difference ${pts(c.difference.value)} points${
            ci ? ` [95% CI ${pts(ci.low)}, ${pts(ci.high)}]` : ""
          } (paired task bootstrap)<br>per task: A wins ${c.perTask.wins}, loses ${c.perTask.losses}, ties ${
            c.perTask.ties
          } · <span class="mcnemar">McNemar exact: A only ${c.mcnemar.aOnly}, B only ${c.mcnemar.bOnly} of ${
            c.mcnemar.pairs
          } pairs, p = ${c.mcnemar.pValue.toFixed(3)}</span><br>$/resolved ${usd(c.a.costPerResolved.valueNanoUsd)} vs ${usd(
            c.b.costPerResolved.valueNanoUsd,
          )}${c.warnings.map((w) => `<br><span class="warn">warning: ${esc(w)}</span>`).join("")}</div>`;
        })
        .join("")
    : '<p class="muted">nothing to pair: one harness / model only — pick another run or "by"</p>';
  const f = $("plot-frontier");
  f.hidden = false;
  f.src = `/api/plots/frontier.svg?${q}`;
}
$("cmp-go").addEventListener("click", () => compare().catch(showError));

// ---- drill-down -----------------------------------------------------------------------------------------------

function patchHtml(text) {
  return text
    .split("\n")
    .map((l) => {
      const cls =
        l.startsWith("+") && !l.startsWith("+++")
          ? "add"
          : l.startsWith("-") && !l.startsWith("---")
            ? "del"
            : "";
      return cls ? `<span class="${cls}">${esc(l)}</span>` : esc(l);
    })
    .join("\n");
}

async function drill(cellId) {
  $("drill").hidden = false;
  $("drill-title").textContent = cellId;
  $("drill-body").innerHTML = '<p class="muted">loading…</p>';
  const res = await fetch(`/api/runs/${encodeURIComponent(current)}/cells/${encodeURIComponent(cellId)}`);
  const d = await res.json();
  if (!res.ok) {
    $("drill-body").textContent = d.error;
    return;
  }
  const r = d.row;
  const parts = [];
  if (!r) parts.push('<p class="muted">No attempt row yet (the cell has not finished an attempt).</p>');
  else {
    parts.push(
      `<table>${[
        ["status", r.status],
        ["attempt", r.attempt],
        [
          "harness / model",
          `${r.harness} / ${r.model}${r.review_model ? ` (review: ${r.review_model})` : ""}`,
        ],
        ["task", r.task_id],
        ["exit / error class", `${r.exit_class ?? "—"} / ${r.error_class ?? "—"}`],
        [
          "grade",
          r.grade_status
            ? `${r.grade_status}${r.resolved === null ? "" : r.resolved ? " (resolved)" : " (not resolved)"}`
            : "—",
        ],
        ["verdict score", r.verdict_score ?? "—"],
        ["attempt cost (row)", usd(r.total_cost_nano_usd)],
        ["latency", dur(r.latency_ms)],
        ["error", r.error_message ?? "—"],
      ]
        .map(([k, v]) => `<tr><th>${k}</th><td>${esc(v)}</td></tr>`)
        .join("")}</table>`,
    );
  }
  const lt = d.ledgerTotals;
  parts.push(
    `<h3>Ledger calls: ${lt.calls}, <span id="drill-ledger-cost" data-nano="${lt.costNanoUsd}">${usd(lt.costNanoUsd)}</span>` +
      ` <span class="muted">(voided ${usd(lt.voidedNanoUsd)})</span></h3>`,
    `<table><thead><tr><th>attempt</th><th>model</th><th>status</th><th>in</th><th>out</th><th>cache r/w</th><th>cost</th><th>latency</th><th>pacer</th><th></th></tr></thead><tbody>${d.ledger
      .map(
        (c) =>
          `<tr><td>${c.attempt}</td><td>${esc(c.model)}</td><td>${esc(c.status)}</td><td>${int(c.input_tokens)}</td><td>${int(
            c.output_tokens,
          )}</td><td>${int(c.cache_read_tokens)}/${int(c.cache_write_tokens)}</td><td>${usd(Number(c.cost_nano_usd))}</td><td>${
            c.latency_ms ?? "—"
          }ms</td><td>${c.pacer_wait_ms ?? 0}ms</td><td>${c.voided ? "voided" : ""}</td></tr>`,
      )
      .join("")}</tbody></table>`,
  );
  if (d.phases.length)
    parts.push(
      `<h3>Phases</h3><table><thead><tr><th>phase</th><th>model</th><th>cost</th><th>in/out</th><th>exit</th></tr></thead><tbody>${d.phases
        .map(
          (p) =>
            `<tr><td>${esc(p.phase_name)}</td><td>${esc(p.model)}</td><td>$${esc(p.total_cost ?? "0")}</td><td>${int(
              p.input_tokens,
            )}/${int(p.output_tokens)}</td><td>${esc(p.exit_code)}</td></tr>`,
        )
        .join("")}</tbody></table>`,
    );
  parts.push(
    `<h3>Patch <span class="muted">(${esc(d.patch.source)}${d.patch.truncated ? ", cut" : ""})</span></h3>`,
    `<pre id="drill-patch">${d.patch.text ? patchHtml(d.patch.text) : "(empty)"}</pre>`,
  );
  if (r?.grade_report)
    parts.push(`<h3>Grade report</h3><pre>${esc(JSON.stringify(r.grade_report, null, 2))}</pre>`);
  if (r?.verdict) parts.push(`<h3>Verdict</h3><pre>${esc(JSON.stringify(r.verdict, null, 2))}</pre>`);
  const latest = r?.attempt ?? 0;
  parts.push(
    `<h3>Step by step <select id="drill-attempt">${Array.from(
      { length: latest + 1 },
      (_, i) => `<option value="${i}"${i === latest ? " selected" : ""}>attempt ${i}</option>`,
    ).join("")}</select> <a id="drill-raw" target="_blank">raw trajectory.jsonl</a></h3>`,
    '<div id="drill-steps"><p class="muted">loading…</p></div>',
  );
  $("drill-body").innerHTML = parts.join("");
  const show = () => steps(cellId, Number($("drill-attempt").value)).catch(showError);
  $("drill-attempt").addEventListener("change", show);
  if (r) void show();
  else $("drill-steps").textContent = "(no attempt row yet)";
}

const STEP_PAGE = 50;

/** One attempt as ATIF steps: every model call with its figures, and what the harness said and did. */
async function steps(cellId, attempt) {
  const base = `/api/runs/${encodeURIComponent(current)}/cells/${encodeURIComponent(cellId)}`;
  $("drill-raw").href = `${base}/trajectory.jsonl?attempt=${attempt}`;
  const res = await fetch(`${base}/steps?attempt=${attempt}`);
  const t = await res.json();
  if (!res.ok) {
    $("drill-steps").textContent = t.error;
    return;
  }
  const fm = t.final_metrics;
  let shown = 0;
  const box = $("drill-steps");
  box.innerHTML = `<p class="muted" id="steps-summary">${t.steps.length} steps · ${int(fm.total_prompt_tokens)} prompt tokens (${int(
    fm.total_cached_tokens,
  )} cached) · ${int(fm.total_completion_tokens)} completion · ${usd(fm.extra.total_cost_nano_usd)} · pacer wait ${dur(
    fm.extra.pacer_wait_ms,
  )}</p><div id="steps-list"></div><button id="steps-more" type="button" hidden>more steps</button>`;
  const more = () => {
    const next = t.steps.slice(shown, shown + STEP_PAGE);
    shown += next.length;
    $("steps-list").insertAdjacentHTML("beforeend", next.map(stepHtml).join(""));
    $("steps-more").hidden = shown >= t.steps.length;
    $("steps-more").textContent = `more steps (${t.steps.length - shown} left)`;
  };
  $("steps-more").addEventListener("click", more);
  more();
}

function stepHtml(s) {
  const m = s.metrics;
  const meta = m
    ? `${esc(s.model_name ?? "")} · in ${int(m.prompt_tokens)} (cached ${int(m.cached_tokens)}) · out ${int(
        m.completion_tokens,
      )} · ${usd(m.extra.cost_nano_usd)} · ${m.extra.latency_ms ?? "—"} ms · pacer ${m.extra.pacer_wait_ms} ms${
        s.extra?.voided ? " · voided" : ""
      }`
    : "";
  const calls = (s.tool_calls ?? [])
    .map(
      (c) => `<div>→ <b>${esc(c.function_name)}</b> <code>${esc(JSON.stringify(c.arguments))}</code></div>`,
    )
    .join("");
  const results = (s.observation?.results ?? []).map((o) => `<pre>${esc(o.content ?? "")}</pre>`).join("");
  return `<div class="step ${s.source}" data-step="${s.step_id}"><div class="meta">#${s.step_id} ${s.source}${
    s.timestamp ? ` · ${esc(s.timestamp)}` : ""
  }${meta ? ` · ${meta}` : ""}</div>${s.reasoning_content ? `<pre class="muted">${esc(s.reasoning_content)}</pre>` : ""}${
    s.message ? `<pre>${esc(s.message)}</pre>` : ""
  }${calls}${results}</div>`;
}
$("drill-close").addEventListener("click", () => {
  $("drill").hidden = true;
});

start().catch(showError);
