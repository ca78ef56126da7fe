// Drives JupyterLab in Debian's Chromium the way a student and an instructor would, for
// tests/browser/test_lab_browser.py, which starts the server and judges the JSON this prints.
//
//   node drive_lab.mjs '{"base": "http://127.0.0.1:PORT", "token": "...", "notebooks": [...],
//                        "screenshots": "DIR", "formgrader": true, "timeouts": {...}}'
//
// For each notebook: open it, Run > Run All Cells, wait until the kernel is idle and no cell is
// queued, collect the stderr outputs (JupyterLab renders an error output as stderr too), then move
// the first sweep slider with the keyboard and report whether the plot image changed. Then
// Nbgrader > Formgrader. Every wait is bounded; a step that fails is reported in the JSON (with a
// screenshot) rather than thrown, so one report says all.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const cfg = JSON.parse(process.argv[2]);
const T = { launch: 60_000, open: 120_000, run: 900_000, slider: 300_000, formgrader: 60_000,
            ...(cfg.timeouts || {}) };
fs.mkdirSync(cfg.screenshots, { recursive: true });
// A failure screenshot left by an earlier run would read as this run's.
for (const f of fs.readdirSync(cfg.screenshots)) {
  if (f.endsWith("-failure.png")) fs.rmSync(path.join(cfg.screenshots, f));
}
const shots = [];

async function shot(page, name, locator) {
  const file = path.join(cfg.screenshots, `${name}.png`);
  try {
    if (locator) {
      // Off-screen cells are laid out lazily (content-visibility), so the first scroll can land
      // short of the element: scroll, let the layout settle, scroll again.
      await locator.scrollIntoViewIfNeeded();
      await page.waitForTimeout(700);
      await locator.scrollIntoViewIfNeeded();
    }
    await (locator || page).screenshot({ path: file, timeout: 30_000 });
    shots.push(file);
  } catch (e) {
    log(`screenshot ${name} failed: ${e.message.split("\n")[0]}`);
  }
}

function log(msg) {
  process.stderr.write(`drive_lab: ${msg}\n`);
}

// The notebook's execution state, read from the DOM as a person reads it: the [n] / [*] prompts
// and the kernel indicator in the toolbar.
function notebookState() {
  const panel = document.querySelector(".jp-NotebookPanel:not(.lm-mod-hidden)");
  if (!panel) return null;
  const prompts = [...panel.querySelectorAll(".jp-CodeCell .jp-InputPrompt")]
    .map((p) => p.textContent.trim());
  const indicator = panel.querySelector(".jp-Notebook-ExecutionIndicator");
  const status = indicator ? indicator.getAttribute("data-status") : null;
  return {
    codeCells: prompts.length,
    executed: prompts.filter((p) => /\[\d+\]/.test(p)).length,
    running: prompts.filter((p) => p.includes("*")).length,
    status,
  };
}

function outputsOf() {
  const panel = document.querySelector(".jp-NotebookPanel:not(.lm-mod-hidden)");
  const text = (sel) => [...panel.querySelectorAll(sel)].map((e) => e.textContent.trim());
  return {
    stderr: text('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'),
    sliders: panel.querySelectorAll(".widget-slider .noUi-handle").length,
    // A widget whose model is gone renders as a bare .jupyter-widgets node holding only the text
    // "Error displaying widget: model not found" (e.g. a closed progress bar inside an Output widget).
    widgetErrors: [...panel.querySelectorAll(
      ".jupyter-widgets .jp-RenderedText, .jupyter-widgets-view-error, .jupyter-widgets")]
      .filter((e) => e.children.length === 0 || e.classList.contains("jp-RenderedText"))
      .map((e) => e.textContent.trim())
      .filter((t) => /Error displaying widget|model not found/i.test(t)),
  };
}

// When the kernel list arrives late (a loaded machine), JupyterLab asks which kernel to start, with
// the notebook's own kernel preselected: accept it, as a person would. True if it asked.
async function acceptKernelDialog(page) {
  const ask = page.locator(".jp-Dialog", { hasText: "Select Kernel" });
  if (!(await ask.count())) return false;
  await ask.locator(".jp-Dialog-button.jp-mod-accept").click();
  return true;
}

async function openNotebook(page, rel) {
  await page.goto(`${cfg.base}/lab/tree/${rel}?reset&token=${cfg.token}`, { timeout: T.open });
  const end = Date.now() + T.open;
  let ready = 0;
  for (;;) {
    const asked = await acceptKernelDialog(page);
    const s = await page.evaluate(notebookState);
    ready = !asked && s && s.status === "idle" ? ready + 1 : 0;
    if (ready >= 3) return;
    if (Date.now() > end) throw new Error(`${rel} did not open with an idle kernel in ${T.open / 1000} s`);
    await page.waitForTimeout(500);
  }
}

async function runAll(page) {
  // On a loaded machine the first click can land before the notebook takes commands: click again
  // until a cell is queued or has run.
  const started = (st) => st && (st.running > 0 || st.executed > 0);
  let s = null;
  for (let attempt = 0; attempt < 3 && !started(s); attempt++) {
    await acceptKernelDialog(page);
    await page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current").first().click();
    await page.locator(".lm-MenuBar-item", { hasText: /^Run$/ }).click();
    await page.locator(".lm-Menu-item", { has: page.locator(".lm-Menu-itemLabel", { hasText: /^Run All Cells$/ }) })
      .click();
    const end = Date.now() + 20_000;
    do {
      await page.waitForTimeout(500);
      s = await page.evaluate(notebookState);
    } while (!started(s) && Date.now() < end);
  }
  if (!started(s)) throw new Error(`Run > Run All Cells started nothing: ${JSON.stringify(s)}`);
  // Then wait for the end: idle with nothing queued, three polls in a row.
  let quiet = 0;
  const end = Date.now() + T.run;
  for (;;) {
    s = await page.evaluate(notebookState);
    quiet = s && s.running === 0 && s.status === "idle" ? quiet + 1 : 0;
    if (quiet >= 3) return s;
    if (Date.now() > end) throw new Error(`Run All did not finish in ${T.run / 1000} s: ${JSON.stringify(s)}`);
    await page.waitForTimeout(1000);
  }
}

// Moves the first slider of a sweep box (a VBox holding sliders and the plot's Output widget) one
// step with the keyboard (right, or left from the last value) and reports the readout and image
// before and after.
async function moveSlider(page, stem) {
  const box = page.locator(".widget-vbox", { has: page.locator(".widget-slider") })
    .filter({ has: page.locator("img") }).first();
  if ((await box.count()) === 0) return { found: false };
  await box.scrollIntoViewIfNeeded();
  const img = box.locator("img").first();
  const readout = box.locator(".widget-slider .widget-readout").first();
  const before = { src: await img.getAttribute("src"), value: (await readout.textContent()).trim() };
  await shot(page, `${stem}-sweep-before`, box);
  const handle = box.locator(".widget-slider .noUi-handle").first();
  const atEnd = await handle.evaluate((h) => h.getAttribute("aria-valuenow") === h.getAttribute("aria-valuemax"));
  await handle.focus();
  await page.keyboard.press(atEnd ? "ArrowLeft" : "ArrowRight");
  // Wait for a new image, then until it has stayed the same for 2 s: a redraw can pass through
  // intermediate outputs (a progress bar, an empty figure) before the plot.
  let after = before;
  let stableSince = 0;
  const end = Date.now() + T.slider;
  while (Date.now() < end) {
    await page.waitForTimeout(500);
    const src = await img.getAttribute("src").catch(() => null);
    if (!src || src === before.src) continue;
    if (src !== after.src) {
      after = { src, value: (await readout.textContent()).trim() };
      stableSince = Date.now();
    } else if (Date.now() - stableSince >= 2000) {
      break;
    }
  }
  await page.waitForTimeout(500); // let the new image paint before the screenshot
  await shot(page, `${stem}-sweep-after`, box);
  return {
    found: true,
    valueBefore: before.value,
    valueAfter: after.value,
    imageChanged: after.src !== before.src,
    imageBytes: [before.src ? before.src.length : 0, after.src ? after.src.length : 0],
  };
}

async function driveNotebook(page, rel) {
  const stem = path.basename(rel, ".ipynb");
  const result = { notebook: rel };
  try {
    await openNotebook(page, rel);
    await shot(page, `${stem}-opened`);
    const t0 = Date.now();
    result.state = await runAll(page);
    result.runSeconds = Math.round((Date.now() - t0) / 1000);
    Object.assign(result, await page.evaluate(outputsOf));
    // Back to the top: lazily laid-out cells paint only after a moment (as in shot()).
    const top = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first();
    await top.scrollIntoViewIfNeeded();
    await page.waitForTimeout(700);
    await top.scrollIntoViewIfNeeded();
    await page.waitForTimeout(700);
    await shot(page, `${stem}-ran-top`);
    // The first sweep cell with its output: sliders and a plot, or the sentence saying why not.
    const sweepCell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell",
      { hasText: "widgets.sweep(" }).first();
    if ((await sweepCell.count()) > 0) await shot(page, `${stem}-sweep-cell`, sweepCell);
    // A GPU cell with its output: real results on a GPU, the one-sentence message without one.
    const gpuCell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell",
      { hasText: "%%gpu" }).first();
    if ((await gpuCell.count()) > 0) await shot(page, `${stem}-gpu-cell`, gpuCell);
    result.slider = await moveSlider(page, stem);
    // Scrolling and the slider re-render widgets: errors that show only then count too.
    const later = (await page.evaluate(outputsOf)).widgetErrors;
    result.widgetErrors = [...new Set([...result.widgetErrors, ...later])];
  } catch (e) {
    result.failure = e.message;
    await shot(page, `${stem}-failure`);
  }
  return result;
}

async function openFormgrader(page) {
  const result = {};
  try {
    await page.goto(`${cfg.base}/lab?reset&token=${cfg.token}`, { timeout: T.open });
    await page.locator(".lm-MenuBar-item", { hasText: /^Nbgrader$/ }).click({ timeout: T.formgrader });
    await page.locator('.lm-Menu-item[data-command="nbgrader:open-formgrader"]').click();
    const frame = page.frameLocator("iframe").first();
    // The formgrader fills its table of source assignments after the page loads.
    await frame.locator("text=Manage Assignments").first().waitFor({ timeout: T.formgrader });
    await frame.locator("td", { hasText: /^\d\d_[a-z0-9_]+$/ }).first().waitFor({ timeout: T.formgrader });
    await page.waitForTimeout(1000);
    result.assignments = await frame.locator("td", { hasText: /^\d\d_[a-z0-9_]+$/ }).allTextContents();
    result.assignments = [...new Set(result.assignments.map((s) => s.trim()))];
  } catch (e) {
    result.failure = e.message.split("\n")[0];
  }
  await shot(page, "formgrader");
  return result;
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "course-chromium-"));
const report = { notebooks: [] };
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: cfg.chromium || "/usr/bin/chromium",
    headless: true,
    timeout: T.launch,
    viewport: { width: 1400, height: 1000 },
    // Debian's Chromium as root, on a machine whose only network is loopback.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(30_000);
  page.on("pageerror", (e) => log(`page error: ${e.message}`));
  for (const rel of cfg.notebooks) {
    log(`notebook ${rel}`);
    report.notebooks.push(await driveNotebook(page, rel));
  }
  if (cfg.formgrader) {
    log("formgrader");
    report.formgrader = await openFormgrader(page);
  }
} catch (e) {
  report.failure = e.message;
} finally {
  if (context) await context.close().catch(() => {});
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
report.screenshots = shots;
process.stdout.write(JSON.stringify(report) + "\n");
