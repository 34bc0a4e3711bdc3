// The planner page: every number on it comes from workloadspread-core (Rust → wasm);
// this file only reads inputs and draws the JSON the wasm exports return.
import init, { plan, examples, version } from "./pkg/playground.js";
import { locate } from "./locate.js";

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
};

const state = { examples: [], selected: 0, result: null };

function stepsList() {
  return $("steps").value.split(/[,\s→]+/).filter((s) => s !== "");
}

function debounce(fn, ms) {
  let t;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

function loadExample(id) {
  const ex = state.examples.find((e) => e.id === id) ?? state.examples[0];
  $("example").value = ex.id;
  $("manifest").value = ex.manifest;
  $("nodes").value = ex.nodes;
  $("nodes-box").open = ex.nodes.trim() !== "";
  $("steps").value = ex.steps;
  state.selected = stepsList().length - 1;
  update();
}

function update() {
  const manifest = $("manifest").value;
  const result = JSON.parse(plan(manifest, $("steps").value, $("nodes").value));
  state.result = result;
  drawGutter(manifest, result.validation.problems);
  drawProblems(manifest, result.validation.problems);
  $("nodes-summary").textContent = result.nodes.length
    ? `(${result.nodes.length} simulated)` : "(none: every pod schedules)";
  const n = result.steps.length;
  state.selected = Math.min(Math.max(state.selected, 0), Math.max(n - 1, 0));
  drawStepButtons(result.steps);
  drawStep(result.steps[state.selected]);
  $("status").textContent = result.validation.valid
    ? `valid (${result.validation.apiVersion})`
    : `${result.validation.problems.length} problem(s)`;
  $("status").className = result.validation.valid ? "ok" : "bad";
}

function problemLine(manifest, p) {
  if (p.input !== "manifest") return null;
  return p.line ?? (p.path ? locate(manifest, p.path) : null);
}

function drawProblems(manifest, problems) {
  const list = $("problems");
  list.replaceChildren();
  for (const p of problems) {
    const line = problemLine(manifest, p);
    const where = [p.input !== "manifest" ? p.input : null, line ? `line ${line}` : null,
      p.path || null].filter(Boolean).join(" · ");
    const item = el("li", { "data-path": p.path, "data-input": p.input, "data-line": line ?? "" },
      el("span", { class: "where", text: where }), " ", el("span", { text: p.message }));
    if (line) item.addEventListener("click", () => selectLine($("manifest"), line));
    list.append(item);
  }
}

function drawGutter(manifest, problems) {
  const bad = new Set(problems.map((p) => problemLine(manifest, p)).filter(Boolean));
  const count = manifest.split("\n").length;
  const gutter = $("gutter");
  gutter.replaceChildren(...Array.from({ length: count }, (_, i) =>
    el("span", { class: bad.has(i + 1) ? "bad" : "", text: `${i + 1}\n` })));
  gutter.scrollTop = $("manifest").scrollTop;
}

function selectLine(textarea, line) {
  const lines = textarea.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  textarea.focus();
  textarea.setSelectionRange(start, start + lines[line - 1].length);
}

function drawStepButtons(steps) {
  const box = $("step-buttons");
  box.replaceChildren(...steps.map((s, i) => {
    const b = el("button", { type: "button", role: "tab", "data-step": i,
      "aria-selected": String(i === state.selected), text: `${i ? "→ " : ""}${s.replicas}` });
    b.addEventListener("click", () => { state.selected = i; update(); });
    return b;
  }));
  const current = steps[state.selected];
  const slider = $("replicas");
  const top = Math.max(50, ...steps.map((s) => s.replicas * 2));
  slider.max = String(Math.min(top, 2000));
  slider.value = String(current ? current.replicas : 0);
  slider.disabled = !current;
  $("replicas-value").textContent = slider.value;
}

function costClass(cost) {
  if (cost === null || cost === undefined) return "cost-none";
  if (cost < 0) return "cost-neg";
  return cost >= 200 ? "cost-high" : "cost-low";
}

function drawStep(step) {
  const picture = $("picture");
  const body = $("step-table").querySelector("tbody");
  if (!step) {
    picture.replaceChildren(el("p", { class: "hint", text: "Fix the problems to see the plan." }));
    body.replaceChildren();
    $("events").replaceChildren();
    $("scale-in").replaceChildren();
    return;
  }
  const columns = step.subsets.map((s) => ({ ...s, key: s.name }));
  if (step.unplaced > 0) {
    columns.push({ name: "(no subset)", key: "", pods: step.unplaced, maxReplicas: null,
      minReplicas: null, missingReplicas: 0, unschedulable: false });
  }
  picture.replaceChildren(...columns.map((c) => subsetColumn(step, c)));
  body.replaceChildren(...columns.map((c) => subsetRow(step, c)));
  drawEvents(step);
  const byName = new Map(step.pods.map((p) => [p.name, p]));
  $("scale-in").replaceChildren(...step.scaleInOrder.slice(0, 40).map((name) => {
    const p = byName.get(name);
    return el("li", { text: `${name} — ${p?.subset ?? "no subset"}, cost ${p?.deletionCost ?? "none"}` });
  }));
}

const podsOf = (step, c) => step.pods.filter((p) => (p.subset ?? "") === c.key);

function subsetColumn(step, c) {
  const pods = podsOf(step, c);
  const limit = c.maxReplicas === null ? "∞" : c.maxReplicas;
  const head = el("div", { class: "subset-head" },
    el("strong", { text: c.name }), " ",
    el("span", { class: "count", "data-count": c.pods, text: `${c.pods} / ${limit}` }));
  if (c.unschedulable) head.append(" ", el("span", { class: "badge", text: "unschedulable" }));
  const dots = el("div", { class: "dots" }, ...pods.map((p) => el("span", {
    class: `pod ${costClass(p.deletionCost)}${p.pending ? " pending" : ""}`,
    title: `${p.name}\ncost ${p.deletionCost ?? "none"}${p.node ? `\nnode ${p.node}` : ""}${p.pending ? "\nPending: no node fits" : ""}`,
    "data-pod": p.name,
  }, el("small", { text: p.deletionCost ?? "" }))));
  return el("div", { class: "subset", "data-subset": c.name, "data-pods": c.pods }, head, dots);
}

function tally(values) {
  const counts = new Map();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  return [...counts].map(([v, n]) => `${v}×${n}`).join(", ");
}

function subsetRow(step, c) {
  const pods = podsOf(step, c);
  const nodes = tally(pods.map((p) => p.node ?? (p.pending ? "Pending" : "—")));
  const costs = tally(pods.map((p) => p.deletionCost ?? "none"));
  const cells = [c.name, c.pods, c.maxReplicas ?? "∞", c.minReplicas ?? "—", c.missingReplicas,
    nodes, costs];
  return el("tr", { "data-subset": c.name }, ...cells.map((v) => el("td", { text: String(v) })));
}

function drawEvents(step) {
  const lines = [];
  if (step.deleted.length) lines.push(`Scale-in removed ${step.deleted.length}: ${step.deleted.join(", ")}`);
  if (step.rescheduled.length) {
    lines.push(`Rescheduled ${step.rescheduled.length} unschedulable pod(s): ${step.rescheduled.join(", ")}`);
  }
  const pending = step.pods.filter((p) => p.pending).length;
  if (pending) lines.push(`${pending} pod(s) Pending: no node fits their subset`);
  if (step.unplaced) lines.push(`${step.unplaced} pod(s) admitted without a subset (every subset full)`);
  $("events").replaceChildren(...lines.map((t) => el("p", { text: t })));
}

function onSlider() {
  const steps = stepsList();
  if (!steps.length) return;
  steps[state.selected] = $("replicas").value;
  $("steps").value = steps.join(",");
  update();
}

async function main() {
  await init();
  state.examples = JSON.parse(examples());
  $("version").textContent = version();
  $("example").replaceChildren(...state.examples.map((e) => el("option", { value: e.id, text: e.title })));
  $("example").addEventListener("change", (e) => loadExample(e.target.value));
  const later = debounce(update, 150);
  for (const id of ["manifest", "nodes", "steps"]) $(id).addEventListener("input", later);
  $("manifest").addEventListener("scroll", () => { $("gutter").scrollTop = $("manifest").scrollTop; });
  $("replicas").addEventListener("input", onSlider);
  loadExample(new URLSearchParams(location.search).get("example") ?? state.examples[0].id);
  document.body.dataset.ready = "true";
}

main().catch((e) => {
  $("status").textContent = `failed to load the planner: ${e}`;
  $("status").className = "bad";
});
