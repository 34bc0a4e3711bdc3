// Browser test of the planner page: headless system Chromium driven by playwright-core.
// The page's per-subset counts are compared with the native planner (the controller's
// `plan -o json`, same core compiled for x86_64) for the same inputs.
//
//   node tests/browser.mjs            (after `make playground` and `cargo build --bins`)
// Env: WS_PLAYGROUND_DIST, WS_CONTROLLER_BIN, WS_PLAYGROUND_OUT (screenshot dir),
//      CHROMIUM, WS_REQUIRE_BROWSER=1 (fail instead of skipping without Chromium).
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { dirname, extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const dist = process.env.WS_PLAYGROUND_DIST ?? join(root, "playground/dist");
const controller = process.env.WS_CONTROLLER_BIN ??
  join(process.env.CARGO_TARGET_DIR ?? join(root, "target"), "debug/workloadspread-controller");
const outDir = process.env.WS_PLAYGROUND_OUT ??
  join(process.env.CARGO_TARGET_DIR ?? join(root, "target"), "playground-test");
const examplesDir = join(root, "playground/examples");
const WAIT = { timeout: 15000 };

function findChromium() {
  for (const c of [process.env.CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"]) {
    if (c && existsSync(c)) return c;
  }
  return null;
}

const MIME = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css",
  ".wasm": "application/wasm", ".png": "image/png" };

function serve(dir) {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname));
    const file = join(dir, path.endsWith("/") ? `${path}index.html` : path);
    if (!file.startsWith(dir) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": MIME[extname(file)] ?? "application/octet-stream" });
    res.end(readFileSync(file));
  });
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok(server)));
}

/** The native planner's answer for an example (optionally with other steps). */
function nativePlan(id, steps, withNodes) {
  const args = ["plan", "-o", "json", "--replicas", steps];
  const nodes = join(examplesDir, `${id}.nodes.yaml`);
  if (withNodes && existsSync(nodes)) args.push("--nodes", nodes);
  args.push(join(examplesDir, `${id}.yaml`));
  return JSON.parse(execFileSync(controller, args, { encoding: "utf8" }));
}

/** What the page shows for the selected step: subset → pods (header and dots). */
async function renderedCounts(page) {
  return page.$$eval("#picture .subset", (cols) => cols.map((c) => ({
    name: c.dataset.subset,
    pods: Number(c.dataset.pods),
    dots: c.querySelectorAll(".pod").length,
    rows: Number(document.querySelector(`#step-table tr[data-subset="${c.dataset.subset}"] td:nth-child(2)`)?.textContent),
  })));
}

function expectedCounts(step) {
  const cols = step.subsets.map((s) => ({ name: s.name, pods: s.pods }));
  if (step.unplaced > 0) cols.push({ name: "(no subset)", pods: step.unplaced });
  return cols;
}

async function checkSteps(page, id, stepsText, withNodes) {
  const native = nativePlan(id, stepsText, withNodes);
  for (let i = 0; i < native.length; i++) {
    await page.click(`#step-buttons button[data-step="${i}"]`);
    await page.waitForSelector(`#step-buttons button[data-step="${i}"][aria-selected="true"]`, WAIT);
    const shown = await renderedCounts(page);
    const want = expectedCounts(native[i]);
    assert.deepEqual(shown.map(({ name, pods }) => ({ name, pods })), want,
      `${id} step ${i} (${native[i].replicas} replicas)`);
    for (const c of shown) assert.equal(c.dots, c.pods, `${id} step ${i}: dots of ${c.name}`);
    for (const c of shown) assert.equal(c.rows, c.pods, `${id} step ${i}: table row of ${c.name}`);
    const first = await page.$eval("#scale-in li:first-child", (li) => li.textContent).catch(() => null);
    if (native[i].scaleInOrder.length) assert.ok(first.startsWith(native[i].scaleInOrder[0]), first);
  }
  return native;
}

async function chooseExample(page, id) {
  await page.selectOption("#example", id);
  await page.waitForFunction((x) => document.getElementById("example").value === x, id, WAIT);
  return page.inputValue("#steps");
}

async function main() {
  const exe = findChromium();
  if (!exe) {
    const msg = "SKIP playground browser test: no Chromium (apt-get install chromium)";
    if (process.env.WS_REQUIRE_BROWSER === "1") throw new Error(msg);
    console.log(msg);
    return;
  }
  assert.ok(existsSync(join(dist, "pkg/playground_bg.wasm")), `build the page first: make playground (${dist})`);
  assert.ok(existsSync(controller), `build the controller first: cargo build --bins (${controller})`);
  const server = await serve(resolve(dist));
  const url = `http://127.0.0.1:${server.address().port}/`;
  const browser = await chromium.launch({ executablePath: exe, headless: true,
    // No background networking: this machine (and CI) has no route to Google's services.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
  const errors = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    await page.goto(url);
    await page.waitForSelector("body[data-ready=true]", WAIT);
    const ids = await page.$$eval("#example option", (os) => os.map((o) => o.value));
    assert.deepEqual(ids.sort(), ["adaptive", "arch", "elastic", "min-replicas", "percent", "zones"]);

    // Every example, every step: the page equals the native planner.
    let checked = 0;
    for (const id of ids) {
      const steps = await chooseExample(page, id);
      const native = await checkSteps(page, id, steps, true);
      checked += native.length;
    }
    console.log(`ok: ${ids.length} examples, ${checked} steps match the native planner`);

    // Adaptive: the page shows the rescheduling and the unschedulable subset.
    await chooseExample(page, "adaptive");
    await page.click('#step-buttons button[data-step="0"]');
    await page.waitForSelector('.subset[data-subset="zone-a"] .badge', WAIT);
    assert.match(await page.textContent("#events"), /Rescheduled 3 unschedulable pod/);

    // The slider rewrites the selected step and the plan follows.
    await chooseExample(page, "zones");
    await page.click('#step-buttons button[data-step="1"]');
    await page.locator("#replicas").fill("7");
    await page.waitForFunction(() => document.getElementById("steps").value === "0,7,4,12", null, WAIT);
    await checkSteps(page, "zones", "0,7,4,12", true);
    console.log("ok: slider 10 → 7 re-plans to the native answer");

    // An invalid manifest: the field error is listed with its path and line, the
    // gutter marks the line, and no plan is drawn.
    const manifest = await page.inputValue("#manifest");
    const broken = manifest.replace("maxReplicas: 30%", "maxReplicas: 130%");
    const line = broken.split("\n").findIndex((l) => l.includes("130%")) + 1;
    await page.fill("#manifest", broken);
    const item = page.locator('#problems li[data-path="spec.subsets[0].maxReplicas"]');
    await item.waitFor(WAIT);
    assert.equal(await item.getAttribute("data-line"), String(line));
    assert.match(await item.textContent(), new RegExp(`line ${line} · spec\\.subsets\\[0\\]\\.maxReplicas`));
    assert.equal(await page.textContent("#gutter .bad"), `${line}\n`);
    assert.equal(await page.locator("#picture .subset").count(), 0);
    assert.match(await page.textContent("#status"), /1 problem/);
    await page.screenshot({ path: join(outDir, "playground-invalid.png"), fullPage: true });

    // A YAML syntax error is located by line too.
    await page.fill("#manifest", "apiVersion: apps.kruise.io/v1beta1\nkind: WorkloadSpread\nspec: [\n");
    await page.waitForFunction(() => /YAML/.test(document.getElementById("problems").textContent), null, WAIT);
    const syntax = page.locator('#problems li[data-input="manifest"]').first();
    assert.match(await syntax.getAttribute("data-line"), /^[1-9]\d*$/);

    // The screenshot for the README: the zones example at its last step.
    await chooseExample(page, "zones");
    await page.click('#step-buttons button[data-step="3"]');
    await page.waitForSelector('#step-buttons button[data-step="3"][aria-selected="true"]', WAIT);
    const shot = join(outDir, "playground.png");
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`ok: invalid manifest shows spec.subsets[0].maxReplicas at line ${line}; screenshot ${shot}`);
    assert.deepEqual(errors, [], "browser console errors");
  } finally {
    await browser.close();
    server.close();
  }
}

mkdirSync(outDir, { recursive: true });
const guard = setTimeout(() => { console.error("browser test exceeded 180 s"); process.exit(1); }, 180000);
main().then(() => clearTimeout(guard), (e) => { console.error(e); process.exit(1); });
