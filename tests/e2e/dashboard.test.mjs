// End-to-end tests of the web dashboard (issue 14, acceptance 2) in real headless Chromium
// (Debian's /usr/bin/chromium driven by playwright-core; no browser is downloaded).
//
// The fixtures are real campaigns made by the hpctune binary in a temporary directory: a genetic
// search (generations, curves, timeline), a multi-objective one (Pareto front), a workflow with
// search, ensemble and transfer stages, a PBT stage, and a campaign whose name, categorical values
// and error text carry HTML (the XSS checks). `hpctune dashboard DB... --port 0` serves them; what
// each view shows (its `data-figure` numbers and its ECharts options, read through
// echarts.getInstanceByDom) is compared with the API fetched from node. A slower campaign run with
// `hpctune run --dashboard` checks that the overview updates while it runs. Any console error,
// page error, dialog or request to another origin fails the test (issue 36: the overview's best
// trial as tables, the colour scale's labels, the trial table's stage filter and a transfer
// target's lineage apart from its parameters). Screenshots of each view go to
// <build>/e2e/screenshots/NAME.png.
//
// Run by ctest as test_dashboard_e2e (tests/CMakeLists.txt), or by hand:
//   node tests/e2e/dashboard.test.mjs --binary build/hpctune --build-dir build
// (or HPCTUNE_BINARY and HPCTUNE_BUILD_DIR in the environment). It fails at once, saying so, when
// playwright-core or chromium is missing (tools/setup-deps installs both): a missing browser is
// not a reason to pass the dashboard untested. HPCTUNE_E2E_KEEP=1 keeps
// the temporary directory (the fixture databases) for a look afterwards.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

const here = path.dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.HPCTUNE_CHROMIUM || '/usr/bin/chromium';

// --- arguments ------------------------------------------------------------------------------

function argument(flag, envName, fallback) {
  const i = process.argv.indexOf(flag);
  if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  return process.env[envName] || fallback;
}
const BINARY = path.resolve(argument('--binary', 'HPCTUNE_BINARY', path.join(here, '../../build/hpctune')));
const BUILD_DIR = path.resolve(argument('--build-dir', 'HPCTUNE_BUILD_DIR', path.dirname(BINARY)));
const SHOTS = path.join(BUILD_DIR, 'e2e', 'screenshots');

// What the tests need and do not build: say it and fail at once rather than somewhere deep.
let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  console.error(`test_dashboard_e2e: playwright-core is not installed in ${here}/node_modules ` +
                `(run tools/setup-deps, which runs npm ci there): ${e.message}`);
  process.exit(1);
}
if (!fs.existsSync(CHROMIUM)) {
  console.error(`test_dashboard_e2e: no ${CHROMIUM} (run tools/setup-deps, which installs Debian's chromium)`);
  process.exit(1);
}
if (!fs.existsSync(BINARY)) {
  console.error(`test_dashboard_e2e: no hpctune binary at ${BINARY} (give --binary or HPCTUNE_BINARY)`);
  process.exit(1);
}

// --- the XSS payloads ------------------------------------------------------------------------

const IMG = '<img src=x onerror=alert(1)>';
const SCRIPT_END = '</script>';
// A campaign name can only hold [A-Za-z0-9._-] through a config (it names files), but a database
// may come from anyone: the name is written into the store directly, as a hostile file would.
const XSS_NAME = `xss ${IMG} ${SCRIPT_END}`;

// --- processes, each with a deadline -----------------------------------------------------------

const children = new Set();  // every process started, killed at the end whatever happened

// Whatever ends this process, its children go too (each leads its own process group: the campaign's
// workers with it). The watchdog ends everything well before ctest's limit (240 s), so that ctest
// never has to kill this process and leave a server behind.
const killAll = () => { for (const c of children) { try { process.kill(-c.pid, 'SIGKILL'); } catch { /* gone */ } } };
process.on('exit', () => {
  killAll();
  try {
    if (!process.env.HPCTUNE_E2E_KEEP) fs.rmSync(tmp, { recursive: true, force: true });
  } catch { /* not made yet */ }
});
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => { killAll(); process.exit(128 + os.constants.signals[sig]); });
const WATCHDOG_S = 200;
setTimeout(() => {
  console.error(`test_dashboard_e2e: still running after ${WATCHDOG_S} s: stopping everything`);
  killAll();
  process.exit(1);
}, WATCHDOG_S * 1000).unref();

// Starts `hpctune args...` with its output collected; resolves `lines` as they come.
function startHpctune(args, options = {}) {
  const child = spawn(BINARY, args, { cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.add(child);
  child.output = '';
  const onData = (d) => { child.output += d.toString(); };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  child.exited = new Promise((resolve) => child.on('exit', (code, signal) => {
    children.delete(child);
    resolve({ code, signal });
  }));
  return child;
}

function withDeadline(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function runHpctune(args, options = {}, ms = 60000) {
  const child = startHpctune(args, options);
  const status = await withDeadline(child.exited, ms, `hpctune ${args.join(' ')}`).catch((e) => {
    stop(child);
    throw new Error(`${e.message}\n${child.output}`);
  });
  return { ...status, output: child.output };
}

// Waits until the output of `child` matches `re`; the match.
async function waitForOutput(child, re, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    const m = child.output.match(re);
    if (m) return m;
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${what}: exited before printing ${re}:\n${child.output}`);
    }
    if (Date.now() > deadline) throw new Error(`${what}: nothing matched ${re} within ${ms} ms:\n${child.output}`);
    await sleep(20);
  }
}

// SIGTERM to the process group (the campaign's workers are in it), SIGKILL 3 s later.
function stop(child) {
  if (!children.has(child)) return Promise.resolve();
  const signal = (s) => { try { process.kill(-child.pid, s); } catch { /* gone */ } };
  signal('SIGINT');
  const timer = setTimeout(() => signal('SIGKILL'), 3000);
  return child.exited.finally(() => clearTimeout(timer));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Pids of live processes whose command line mentions `needle` (zombies aside).
function processesMentioning(needle) {
  const out = [];
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d) && Number(d) !== process.pid)) {
    try {
      if (!fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes(needle)) continue;
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
      if (stat[stat.lastIndexOf(')') + 2] !== 'Z') out.push(Number(pid));
    } catch { /* gone meanwhile */ }
  }
  return out;
}

async function until(pred, ms, what) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await pred();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(100);
  }
}

// --- the fixtures -------------------------------------------------------------------------------

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hpctune-e2e-'));

const python = (file, body) => { fs.writeFileSync(path.join(tmp, file), body); return path.join(tmp, file); };

const paretoScript = python('pareto.py', `import json, os
p = json.loads(os.environ["HPCTUNE_PARAMS"])
x, y = p["x"], p["y"]
print("hpctune-report " + json.dumps({"step": 1, "f1": x * x + y * y, "f2": (x - 1) ** 2 + (y - 1) ** 2}), flush=True)
`);

// Reports; fails with HTML in its standard error when its label is "</script>".
const xssScript = python('xss.py', `import json, os, sys
p = json.loads(os.environ["HPCTUNE_PARAMS"])
print("hpctune-report " + json.dumps({"step": 1, "value": p["x"]}), flush=True)
print("label " + p["label"] + " ${IMG} ${SCRIPT_END}", flush=True)
if p["label"] == "${SCRIPT_END}":
    sys.stderr.write("bad label " + p["label"] + " ${IMG} ${SCRIPT_END}\\n")
    sys.exit(1)
`);

// The served campaigns, in index order.
const FIXTURES = [
  { key: 'genetic', config: `name: e2e-genetic
seed: 3
objective: {metric: value, mode: min}
search:
  algorithm: genetic
  max_trials: 24
  settings: {population: 8, generations: 3}
space:
  x1: {type: float, low: -5, high: 10}
  x2: {type: float, low: 0, high: 15}
trainer: {kind: function, name: branin, steps: 4, seconds_per_step: 0.01}
resources: {groups: 2}
` },
  { key: 'pareto', config: `name: e2e-pareto
seed: 4
objectives:
  - {metric: f1, mode: min}
  - {metric: f2, mode: min}
search: {algorithm: random, max_trials: 14}
space:
  x: {type: float, low: -1, high: 2}
  y: {type: float, low: -1, high: 2}
trainer: {kind: command, command: "python3 ${paretoScript}"}
resources: {groups: 2}
` },
  { key: 'workflow', config: `name: e2e-workflow
seed: 3
objective: {metric: val_accuracy, mode: max}
trainer: {kind: mlp, epochs: 2, max_train_samples: 1500, max_test_samples: 500, hidden: 32}
resources: {groups: 2}
stages:
  - name: tune
    kind: search
    search: {algorithm: random, max_trials: 6}
    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}
    trainer: {classes: [0, 1, 2, 3, 4]}
  - {name: blend, kind: ensemble, from: tune, method: greedy, retrain: {top: 2, seeds: 1}}
  - {name: move, kind: transfer, from: [tune], classes: [5, 6, 7, 8, 9], max_train_samples: 500, freeze: 1,
     baseline: true, seeds: 2}
` },
  { key: 'pbt', config: `name: e2e-pbt
seed: 3
objective: {metric: val_accuracy, mode: max}
trainer: {kind: mlp, epochs: 6, max_train_samples: 1000, max_test_samples: 500, hidden: 32, lr_schedule: constant}
resources: {groups: 2}
stages:
  - {name: pop, kind: pbt, population: 4, ready: 2, steps: 6, quantile: 0.5,
     space: {lr: {type: float, low: 0.001, high: 0.5, log: true}, momentum: {type: float, low: 0.0, high: 0.99}}}
` },
  { key: 'xss', config: `name: e2e-xss
seed: 5
objective: {metric: value, mode: max}
search: {algorithm: random, max_trials: 8, max_failures: 100}
space:
  x: {type: float, low: 0, high: 1}
  label: {type: choice, values: ["${IMG}", "${SCRIPT_END}", "plain"]}
trainer: {kind: command, command: "python3 ${xssScript}"}
resources: {groups: 2}
` },
  // Recorded by `hpctune simulate`, not `run`: the app marks it as simulated.
  { key: 'simulated', command: 'simulate', config: `name: e2e-simulated
seed: 6
objective: {metric: value, mode: min}
search: {algorithm: random, max_trials: 10}
space:
  x1: {type: float, low: -5, high: 10}
  x2: {type: float, low: 0, high: 15}
trainer: {kind: function, name: branin, steps: 4}
resources: {groups: 2}
` },
];
const INDEX = Object.fromEntries(FIXTURES.map((f, i) => [f.key, i]));

// The live campaign: about 12 s of trials on one group, so the overview sees several finish.
const LIVE_CONFIG = `name: e2e-live
seed: 9
objective: {metric: value, mode: min}
search: {algorithm: random, max_trials: 12}
space:
  x1: {type: float, low: -5, high: 10}
  x2: {type: float, low: 0, high: 15}
trainer: {kind: function, name: branin, steps: 4, seconds_per_step: 0.25}
resources: {groups: 1}
`;

async function makeFixtures() {
  // Two at a time: the machine may have two cores.
  const run = async (f) => {
    const config = path.join(tmp, `${f.key}.yaml`);
    fs.writeFileSync(config, f.config);
    f.db = path.join(tmp, `${f.key}.db`);
    const r = await runHpctune([f.command ?? 'run', config, '--db', f.db], { cwd: tmp }, 90000);
    assert.equal(r.code, 0, `campaign ${f.key} failed:\n${r.output}`);
  };
  const queue = [...FIXTURES];
  await Promise.all([0, 1].map(async () => { while (queue.length) await run(queue.shift()); }));
  const xss = FIXTURES[INDEX.xss].db;
  execFileSync('sqlite3', [xss, `UPDATE campaigns SET name = '${XSS_NAME.replaceAll("'", "''")}'`]);
}

// --- the server, the API, the browser ----------------------------------------------------------

let server;   // hpctune dashboard over every fixture
let base;     // its URL, ending in '/'
const tokens = {};  // each server's token (every request carries it), by its URL
let browser;  // the persistent context (a fresh profile in tmp)
let page;
const problems = [];  // console errors, page errors, dialogs, foreign requests: each fails the test

async function api(route, origin = base) {
  const url = new URL(route.replace(/^\//, ''), origin);
  const res = await fetch(url, { headers: { Authorization: `Bearer ${tokens[origin]}` }, signal: AbortSignal.timeout(10000) });
  const text = await res.text();
  assert.equal(res.status, 200, `GET ${url}: ${res.status} ${text}`);
  return JSON.parse(text);
}

async function openBrowser() {
  browser = await withDeadline(chromium.launchPersistentContext(path.join(tmp, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
    timeout: 30000,
  }), 40000, 'launching chromium');
  browser.setDefaultTimeout(10000);
  browser.setDefaultNavigationTimeout(15000);
  page = browser.pages()[0] || await browser.newPage();
  watch(page);
}

function watch(p) {
  p.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`); });
  p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  p.on('dialog', (d) => { problems.push(`dialog opened: ${d.type()} ${d.message()}`); d.dismiss().catch(() => {}); });
  p.on('request', (r) => {
    const u = new URL(r.url());
    if (/^(https?|wss?|ftp):$/.test(u.protocol) && u.hostname !== '127.0.0.1') {
      problems.push(`request to another origin: ${r.url()}`);
    }
  });
}

// Fails on what the page reported since the last check (and forgets it, so that one problem fails
// the test it happened in, not every test after it).
function noProblems(when) {
  assert.deepEqual(problems.splice(0), [], `${when}: the page reported problems`);
}

// Opens `#hash` and waits for its section to say it is drawn. Within the app already loaded from
// `origin` this is a hash change, as a click on a link makes (the same hash again: a hashchange
// event, which redraws). The sections there before are marked first, so that one still ready from
// the view before is never taken for the new one.
async function view(hash, name, origin = base) {
  if (page.url().startsWith(origin)) {
    await page.evaluate((h) => {
      for (const s of document.querySelectorAll('section')) s.e2eStale = true;
      if (location.hash === `#${h}`) window.dispatchEvent(new HashChangeEvent('hashchange'));
      else location.hash = h;
    }, hash);
  } else {
    // The URL the server printed, with its token: the server keeps it in a cookie and redirects to /.
    await page.goto(`${origin}?token=${tokens[origin]}#${hash}`);
  }
  await page.waitForFunction((n) => {
    const s = document.getElementById(`view-${n}`);
    return s && s.dataset.ready === '1' && !s.e2eStale;
  }, name, { timeout: 15000 });
  return page.locator(`#view-${name}`);
}

async function shoot(name, fullPage = false) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage });
}

// A figure as text (its data-value, the API's number, when it has one; else what it shows).
async function figure(name) {
  const el = page.locator(`[data-figure="${name}"]`);
  assert.equal(await el.count(), 1, `one element with data-figure="${name}"`);
  const value = await el.getAttribute('data-value');
  return value ? value : (await el.textContent()).trim();
}

// A figure's number: "1,234", "0.7967", "12.3 %", "1:02:03" (h:m:s) are read as numbers.
function number(text) {
  const t = text.replace(/,/g, '').trim();
  if (/^-?\d+(:\d{1,2}){1,2}$/.test(t)) return t.split(':').reduce((a, p) => a * 60 + Number(p), 0);
  const m = t.match(/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?/i);
  assert.ok(m, `'${text}' is not a number`);
  return Number(m[0]);
}

function close(actual, expected, what) {
  const tolerance = 1e-3 * Math.max(Math.abs(expected), 1e-9);
  assert.ok(Math.abs(actual - expected) <= tolerance + 1e-12, `${what}: shown ${actual}, the API says ${expected}`);
}

async function figureNumber(name, expected) {
  close(number(await figure(name)), expected, `data-figure=${name}`);
}

// The ECharts option of #chart-ID, as JSON (functions dropped).
async function chart(id) {
  return page.evaluate((id) => {
    const el = document.getElementById(id);
    if (!el) throw new Error(`no #${id}`);
    if (!el.classList.contains('chart')) throw new Error(`#${id} lacks class "chart"`);
    const inst = window.echarts && window.echarts.getInstanceByDom(el);
    if (!inst) throw new Error(`#${id} holds no ECharts instance`);
    return JSON.parse(JSON.stringify(inst.getOption()));
  }, `chart-${id}`);
}

// A data item's value: ECharts keeps items as values or as {value, ...}.
const value = (d) => (d !== null && typeof d === 'object' && !Array.isArray(d) && 'value' in d ? d.value : d);
const series = (opt, type) => (opt.series || []).filter((s) => !type || s.type === type);

// --- setup and teardown -------------------------------------------------------------------------

before(async () => {
  await makeFixtures();
  server = startHpctune(['dashboard', ...FIXTURES.map((f) => f.db), '--port', '0'], { cwd: tmp });
  const m = await waitForOutput(server, /open in a browser: (http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})/, 10000,
                                'hpctune dashboard');
  base = m[1];
  tokens[base] = m[2];
  await openBrowser();
}, { timeout: 150000 });

after(async () => {
  if (browser) await withDeadline(browser.close(), 10000, 'closing chromium').catch(() => {});
  await Promise.all([...children].map(stop));  // the temporary directory goes at exit
});

// --- the views against the API --------------------------------------------------------------------

test('campaigns list and compare', { timeout: 30000 }, async () => {
  const { campaigns } = await api('api/campaigns');
  assert.equal(campaigns.length, FIXTURES.length);
  await view('/', 'campaigns');
  await shoot('campaigns');
  const rows = page.locator('table#campaigns-table tr[data-index]');
  assert.equal(await rows.count(), campaigns.length, 'one row per campaign');
  for (const c of campaigns) {
    const text = await page.locator(`table#campaigns-table tr[data-index="${c.index}"]`).textContent();
    for (const part of [c.name, c.state, c.algorithm, String(c.trials.total)]) {
      assert.ok(text.includes(part), `campaign row ${c.index} shows '${part}': ${text}`);
    }
  }
  // Two campaigns side by side through the checkboxes and the button.
  await page.check(`input[data-compare="${INDEX.genetic}"]`);
  await page.check(`input[data-compare="${INDEX.pbt}"]`);
  await page.click('#compare');
  await page.waitForSelector('#view-compare[data-ready="1"]');
  assert.match(decodeURIComponent(new URL(page.url()).hash), new RegExp(`^#/compare\\?c=${INDEX.genetic},${INDEX.pbt}$`));
  await shoot('compare');
  const opt = await chart('compare');
  const names = series(opt).map((s) => s.name);
  assert.equal(names.length, 2, 'one best-so-far series per selected campaign');
  for (const k of [INDEX.genetic, INDEX.pbt]) {
    const s = series(opt).find((x) => x.name.includes(campaigns[k].name));
    assert.ok(s, `a series named by ${campaigns[k].name}: ${names}`);
    const h = await api(`api/campaigns/${k}/history`);
    assert.equal(s.data.length, h.points.best.length, `${campaigns[k].name}: a point per trial with an objective`);
    const last = value(s.data[s.data.length - 1]);
    close(Array.isArray(last) ? last[1] : last, h.points.best[h.points.best.length - 1], `${campaigns[k].name}: best so far`);
  }
  noProblems('campaigns');
});

test('overview', { timeout: 30000 }, async () => {
  for (const key of ['genetic', 'workflow']) {
    const i = INDEX[key];
    const o = await api(`api/campaigns/${i}/overview`);
    await view(`/c/${i}`, 'overview');
    if (key === 'genetic') await shoot('overview');
    if (key === 'workflow') await shoot('overview-stages');
    assert.equal(await figure('name'), o.name);
    assert.equal(await figure('state'), o.state);
    await figureNumber('trials-total', o.trials.total);
    for (const [state, n] of Object.entries(o.trials.by_state)) await figureNumber(`count-${state}`, n);
    assert.ok(o.best, `${key}: a best trial`);
    await figureNumber('best-trial', o.best.trial);
    await figureNumber('best-objective', o.best.objective);
    await figureNumber('elapsed', o.elapsed_s);
    if (o.budget.fraction !== null) {
      const shown = number(await figure('budget-fraction'));
      // As a fraction or in percent, whichever the app shows.
      close(shown > 1.0001 || (await figure('budget-fraction')).includes('%') ? shown / 100 : shown, o.budget.fraction,
            'budget-fraction');
    }
    assert.equal(await page.locator('progress#budget').count(), 1, 'the budget progress bar');
    // One note per recorded warning of the master (none in these campaigns), as the API lists them.
    assert.equal(await page.locator('[data-figure="warning"]').count(), (o.warnings || []).length, `${key}: warnings`);
    // The best trial's parameters and metrics as tables, as the trial view shows them (not JSON).
    const cells = async (id) => page.locator(`table#${id} tbody tr`).evaluateAll(
      (rs) => rs.map((r) => [...r.children].map((c) => c.textContent.trim())));
    const params = await cells('best-params');
    assert.deepEqual(params.map((r) => r[0]).sort(), Object.keys(o.best.params).sort(), `${key}: a row per parameter`);
    for (const [name, shown] of params) {
      const v = o.best.params[name];
      if (typeof v === 'number') close(number(shown), v, `${key}: best parameter ${name}`);
      else assert.equal(shown, String(v), `${key}: best parameter ${name}`);
    }
    const metrics = await cells('best-metrics');
    assert.deepEqual(metrics.map((r) => r[0]).sort(), Object.keys(o.best.metrics).sort(), `${key}: a row per metric`);
    for (const [name, shown] of metrics) close(number(shown), o.best.metrics[name], `${key}: best metric ${name}`);
    const bestText = await page.locator('#view-overview div.two').textContent();
    assert.ok(!bestText.includes('{"'), `${key}: no JSON in the best trial's tables`);
    if (o.stages.length) {
      const table = await page.locator('#view-overview table#stages-table').textContent();
      for (const s of o.stages) assert.ok(table.includes(s.name), `stage ${s.name} in the stages table`);
    }
  }
  noProblems('overview');
});

test('a simulated campaign is marked: a badge in the header, a line in the overview', { timeout: 30000 }, async () => {
  const { campaigns } = await api('api/campaigns');
  const mark = campaigns[INDEX.simulated].simulated;
  assert.match(mark ?? '', /^simulated \(machine .+, outcomes function trainer\)$/);
  assert.equal(campaigns[INDEX.genetic].simulated, null, 'a campaign that ran for real has no mark');
  const o = await api(`api/campaigns/${INDEX.simulated}/overview`);
  assert.equal(o.simulated, mark);
  await view(`/c/${INDEX.simulated}`, 'overview');
  await page.waitForSelector('#simulated-badge', { timeout: 10000 });
  assert.equal((await page.locator('#simulated-badge').textContent()).trim(), 'simulated');
  assert.equal(await page.locator('#simulated-badge').getAttribute('title'), mark);
  assert.equal(await figure('simulated'), mark);
  await shoot('overview-simulated');
  await view(`/c/${INDEX.genetic}`, 'overview');
  assert.equal(await page.locator('#simulated-badge').count(), 0, 'no badge on a real campaign');
  assert.equal(await page.locator('[data-figure="simulated"]').count(), 0);
  noProblems('simulated');
});

test('history', { timeout: 30000 }, async () => {
  const i = INDEX.genetic;
  const h = await api(`api/campaigns/${i}/history`);
  const n = h.points.trial.length;
  assert.ok(n >= 10);
  await view(`/c/${i}/history`, 'history');
  await shoot('history');
  await figureNumber('history-points', n);
  const opt = await chart('history');
  const values = series(opt).find((s) => s.name === 'value');
  const best = series(opt).find((s) => s.name === 'best');
  assert.ok(values && best, 'series "value" and "best"');
  assert.equal(values.type, 'scatter');
  assert.equal(best.type, 'line');
  assert.equal(values.data.length, n, 'one point per trial with an objective');
  const y = (d) => { const v = value(d); return Array.isArray(v) ? v[1] : v; };  // [x, y, ...] or y
  close(y(best.data[best.data.length - 1]), h.points.best[n - 1], 'the last best so far');
  for (let k = 0; k < n; ++k) close(y(values.data[k]), h.points.value[k], `history point ${k}`);
  for (let k = 0; k < n; ++k) close(y(best.data[k]), h.points.best[k], `best so far at point ${k}`);
  // The x axis toggles between trial number and time.
  const toggle = page.locator('#history-x');
  assert.equal(await toggle.count(), 1, '#history-x');
  const before = JSON.stringify(values.data);
  if (await toggle.evaluate((el) => el.tagName === 'SELECT')) {
    const options = await toggle.locator('option').evaluateAll((os) => os.map((o) => o.value));
    const current = await toggle.inputValue();
    await toggle.selectOption(options.find((v) => v !== current));
  } else {
    await toggle.click();
  }
  await page.waitForSelector('#view-history[data-ready="1"]');
  await until(async () => JSON.stringify(series(await chart('history')).find((s) => s.name === 'value').data) !== before,
              5000, 'the history x axis toggled');
  noProblems('history');
});

test('generations', { timeout: 30000 }, async () => {
  const i = INDEX.genetic;
  const g = await api(`api/campaigns/${i}/generations`);
  assert.equal(g.generations.length, 3, 'three generations of the genetic search');
  await view(`/c/${i}/generations`, 'generations');
  await shoot('generations');
  await figureNumber('generations', g.generations.length);
  const box = series(await chart('generations'), 'boxplot');
  assert.equal(box.length, 1, 'one boxplot series');
  assert.equal(box[0].data.length, g.generations.length, 'one box per generation');
  box[0].data.forEach((d, k) => {
    const [min, q1, median, q3, max] = value(d);
    const e = g.generations[k];
    close(min, e.min, `generation ${k} min`);
    close(q1, e.q1, `generation ${k} q1`);
    close(median, e.median, `generation ${k} median`);
    close(q3, e.q3, `generation ${k} q3`);
    close(max, e.max, `generation ${k} max`);
  });
  // PBT records generations too.
  const pbt = await api(`api/campaigns/${INDEX.pbt}/generations`);
  await view(`/c/${INDEX.pbt}/generations`, 'generations');
  await figureNumber('generations', pbt.generations.length);
  noProblems('generations');
});

test('parameters: parallel coordinates, slices, contour', { timeout: 30000 }, async () => {
  const i = INDEX.genetic;
  const p = await api(`api/campaigns/${i}/params`);
  await view(`/c/${i}/params`, 'params');
  await shoot('params');
  await figureNumber('params-shown', p.shown);
  await figureNumber('params-total', p.total);
  const parallel = await chart('parallel');
  assert.equal(parallel.parallelAxis.length, p.params.length + 1, 'an axis per parameter and the objective');
  const names = parallel.parallelAxis.map((a) => a.name);
  for (const q of p.params) assert.ok(names.includes(q.name), `an axis for ${q.name}`);
  const lines = series(parallel, 'parallel').reduce((a, s) => a + s.data.length, 0);
  assert.equal(lines, p.shown, 'one line per point the API shows');
  // The colour scale's ends: the objective's maximum (text[0], the high end) and minimum, each
  // formatted, and handles with enough decimals to tell them apart (not "1" and "1").
  const objs = p.points.map((q) => q.objective).filter((x) => typeof x === 'number');
  const lo = Math.min(...objs), hi = Math.max(...objs);
  const scale = parallel.visualMap[0];
  assert.equal(scale.text.length, 2);
  close(number(scale.text[0]), hi, 'the colour scale\'s high end');
  close(number(scale.text[1]), lo, 'the colour scale\'s low end');
  assert.match(scale.text[0], p.mode === 'max' ? /best/ : /worst/);
  assert.match(scale.text[1], p.mode === 'max' ? /worst/ : /best/);
  assert.notEqual(lo.toFixed(scale.precision), hi.toFixed(scale.precision), `handle labels at precision ${scale.precision}`);
  const slice = await chart('slice');
  assert.equal(slice.grid.length, p.params.length, 'one slice grid per parameter');
  await chart('contour');
  for (const sel of ['#contour-x', '#contour-y']) {
    const options = await page.locator(`${sel} option`).evaluateAll((os) => os.map((o) => o.value || o.textContent));
    for (const q of p.params) assert.ok(options.includes(q.name), `${sel} offers ${q.name}`);
  }
  noProblems('params');
});

test('importance', { timeout: 30000 }, async () => {
  const i = INDEX.genetic;
  const imp = await api(`api/campaigns/${i}/importance`);
  assert.equal(imp.importances.length, 2);
  await view(`/c/${i}/importance`, 'importance');
  await shoot('importance');
  assert.equal(await figure('importance-method'), imp.method);
  const opt = await chart('importance');
  const bar = series(opt, 'bar');
  assert.equal(bar.length, 1, 'one bar series');
  const axis = [...(opt.yAxis || []), ...(opt.xAxis || [])].find((a) => a.type === 'category');
  assert.ok(axis, 'a category axis of parameter names');
  const shown = axis.data.map((name, k) => ({ param: value(name), importance: value(bar[0].data[k]) }));
  // Largest first, or largest on top of a horizontal bar chart (the last category).
  const ordered = shown[0].importance >= shown[shown.length - 1].importance ? shown : [...shown].reverse();
  assert.deepEqual(ordered.map((s) => s.param), imp.importances.map((s) => s.param), 'the importance order');
  ordered.forEach((s, k) => close(s.importance, imp.importances[k].importance, `importance of ${s.param}`));
  noProblems('importance');
});

test('learning curves', { timeout: 30000 }, async () => {
  const i = INDEX.genetic;
  const c = await api(`api/campaigns/${i}/curves`);
  assert.ok(c.trials.length > 0);
  await view(`/c/${i}/curves`, 'curves');
  await shoot('curves');
  await figureNumber('curves-trials', c.trials.length);
  const lines = series(await chart('curves'), 'line');
  assert.equal(lines.length, c.trials.length, 'one curve per trial');
  const points = lines.reduce((a, s) => a + s.data.length, 0);
  assert.equal(points, c.trials.reduce((a, t) => a + t.steps.length, 0), 'every point of every curve');
  const metrics = await page.locator('#curves-metric option').evaluateAll((os) => os.map((o) => o.value || o.textContent));
  for (const m of c.metrics) assert.ok(metrics.includes(m), `#curves-metric offers ${m}`);
  noProblems('curves');
});

test('pareto front', { timeout: 30000 }, async () => {
  const i = INDEX.pareto;
  const p = await api(`api/campaigns/${i}/pareto`);
  assert.equal(p.objectives.length, 2);
  assert.ok(p.front.length >= 1);
  await view(`/c/${i}/pareto`, 'pareto');
  await shoot('pareto');
  await figureNumber('pareto-front', p.front.length);
  // The points off the front and the front (its own series, drawn as a line through its points).
  const all = series(await chart('pareto'));
  assert.equal(all.reduce((a, s) => a + s.data.length, 0), p.points.length, 'every point the API gives, once');
  const front = all.find((s) => /front/i.test(s.name || ''));
  assert.ok(front, 'a series for the front');
  assert.equal(front.data.length, p.front.length, 'the front\'s points');
  noProblems('pareto');
});

test('trials table and trial page', { timeout: 40000 }, async () => {
  const i = INDEX.genetic;
  // The page's own request says which page it shows; the same request from node must agree.
  const request = page.waitForResponse((r) => /\/api\/campaigns\/\d+\/trials(\?|$)/.test(r.url()), { timeout: 15000 });
  await view(`/c/${i}/trials`, 'trials');
  const asked = new URL((await request).url());
  await shoot('trials');
  const t = await api(`${asked.pathname.slice(1)}${asked.search}`);
  const all = await api(`api/campaigns/${i}/trials`);
  await figureNumber('trials-total', all.total);
  const ids = async () => page.locator('table#trials-table tr[data-trial]').evaluateAll((rs) => rs.map((r) => Number(r.dataset.trial)));
  assert.deepEqual(await ids(), t.trials.map((x) => x.trial), 'the first page, as the API gives it');
  assert.equal(await page.locator('a#trials-csv').count(), 1, 'the CSV link');
  assert.match(await page.locator('a#trials-csv').getAttribute('href'), /\/api\/campaigns\/\d+\/trials\?.*format=csv/);

  // Sorting by the objective on the server.
  const sorted = page.waitForResponse((r) => /\/trials\?.*sort=objective/.test(r.url()), { timeout: 10000 });
  await page.click('th[data-sort="objective"]');
  const sortUrl = new URL((await sorted).url());
  await page.waitForSelector('#view-trials[data-ready="1"]');
  const bySort = await api(`${sortUrl.pathname.slice(1)}${sortUrl.search}`);
  await until(async () => JSON.stringify(await ids()) === JSON.stringify(bySort.trials.map((x) => x.trial)), 5000,
              'rows in the order of the sorted API page');

  // Filtering: the best trial by its id.
  const best = (await api(`api/campaigns/${i}/overview`)).best.trial;
  await page.fill('input#trials-filter', `#${best}`);
  await page.press('input#trials-filter', 'Enter');
  await until(async () => JSON.stringify(await ids()) === JSON.stringify([best]), 5000, `the filter #${best}`);
  await figureNumber('trials-total', 1);

  // The trial page of the best trial.
  const d = await api(`api/campaigns/${i}/trials/${best}`);
  await view(`/c/${i}/trials/${best}`, 'trial');
  await shoot('trial');
  await figureNumber('trial', d.trial);
  assert.equal(await figure('state'), d.state);
  await figureNumber('objective', d.objective);
  await figureNumber('attempts', d.attempts.length);
  const params = await page.locator('table#trial-params').textContent();
  for (const name of Object.keys(d.params)) assert.ok(params.includes(name), `parameter ${name} on the trial page`);
  const metrics = await page.locator('table#trial-metrics').textContent();
  for (const name of Object.keys(d.metrics)) assert.ok(metrics.includes(name), `metric ${name} on the trial page`);
  const curve = series(await chart('trial-curve'));
  assert.ok(curve.length >= 1 && curve[0].data.length === d.metrics_by_step.length, 'one point per report');
  // Lineage: a genetic child links its parents.
  const child = all.trials.find((x) => (x.parents || []).length > 0);
  assert.ok(child, 'a trial with parents');
  await view(`/c/${i}/trials/${child.trial}`, 'trial');
  for (const parent of child.parents) {
    assert.equal(await page.locator(`a[data-trial-link="${parent}"]`).count() >= 1, true, `a link to parent #${parent}`);
  }
  noProblems('trials');
});

test('trials of a workflow: the stage filter, the trial each started from, lineage apart from parameters', { timeout: 40000 }, async () => {
  const i = INDEX.workflow;
  const all = await api(`api/campaigns/${i}/trials`);
  assert.deepEqual(all.stages, ['tune', 'blend', 'move']);
  await view(`/c/${i}/trials`, 'trials');
  const offered = await page.locator('select#trials-stage option').evaluateAll((os) => os.map((o) => o.value));
  assert.deepEqual(offered, ['', ...all.stages], 'any stage, then each stage');
  const ids = async () => page.locator('table#trials-table tr[data-trial]').evaluateAll((rs) => rs.map((r) => Number(r.dataset.trial)));
  const stageCells = async () => page.locator('table#trials-table tbody tr').evaluateAll(
    (rs) => rs.map((r) => r.children[2].textContent.trim()));
  const filtered = page.waitForResponse((r) => /\/trials\?.*stage=move/.test(r.url()), { timeout: 10000 });
  await page.selectOption('select#trials-stage', 'move');
  const url = new URL((await filtered).url());
  await page.waitForSelector('#view-trials[data-ready="1"]');
  const move = await api(`${url.pathname.slice(1)}${url.search}`);
  assert.ok(move.trials.length > 0 && move.total < all.total, 'a stage is a part of the trials');
  await until(async () => JSON.stringify(await ids()) === JSON.stringify(move.trials.map((x) => x.trial)), 5000,
              'the rows of stage move, as the API gives them');
  await figureNumber('trials-total', move.total);
  assert.ok((await stageCells()).every((c) => c === 'move'), 'every row of stage move');
  // A transfer target: its source in the `from` column, its checkpoint apart from its parameters.
  const target = move.trials.find((t) => t.lineage && t.lineage.source_trial !== undefined) ??
                 move.trials.find((t) => t.parent_trial);
  assert.ok(target, 'a transfer target');
  assert.ok(target.lineage.source_checkpoint, 'its source checkpoint, as lineage');
  for (const t of move.trials) {
    for (const k of Object.keys(t.params)) assert.ok(!/init_from|hpctune_source|max_step/.test(k), `${k} among the parameters`);
  }
  const from = target.lineage.source_trial ?? target.parent_trial;
  assert.equal(await page.locator(`tr[data-trial="${target.trial}"] a[data-trial-link="${from}"]`).count(), 1, 'a link to its source');
  await shoot('trials-stage');
  await view(`/c/${i}/trials/${target.trial}`, 'trial');
  await shoot('trial-target');
  const lineage = await page.locator('table#trial-lineage').textContent();
  assert.ok(lineage.includes('source_checkpoint') && lineage.includes(target.lineage.source_checkpoint), 'the checkpoint as lineage');
  const params = await page.locator('table#trial-params').textContent();
  assert.ok(!params.includes(target.lineage.source_checkpoint), 'the checkpoint is not a parameter');
  // Back to every stage.
  await view(`/c/${i}/trials`, 'trials');
  await page.selectOption('select#trials-stage', '');
  await until(async () => Number(await figure('trials-total')) === all.total, 5000, 'every trial again');
  noProblems('trials-stage');
});

test('timeline', { timeout: 30000 }, async () => {
  const i = INDEX.genetic;
  const t = await api(`api/campaigns/${i}/timeline`);
  await view(`/c/${i}/timeline`, 'timeline');
  await shoot('timeline');
  await figureNumber('utilization', t.utilization);
  const custom = series(await chart('timeline'), 'custom');
  assert.equal(custom.reduce((a, s) => a + s.data.length, 0), t.bars.length, 'one bar per attempt');
  noProblems('timeline');
});

test('stages: ensemble, transfer, PBT', { timeout: 30000 }, async () => {
  const w = await api(`api/campaigns/${INDEX.workflow}/stages`);
  assert.deepEqual(w.stages.map((s) => s.kind), ['search', 'ensemble', 'transfer']);
  await view(`/c/${INDEX.workflow}/stages`, 'stages');
  await shoot('stages');
  const table = await page.locator('#view-stages table#stages-table').textContent();
  for (const s of w.stages) assert.ok(table.includes(s.name) && table.includes(s.kind), `stage ${s.name}`);
  const ensemble = w.stages.find((s) => s.kind === 'ensemble').view;
  // The members' weights (the best single model beside them, without a weight).
  const weights = series(await chart('ensemble'), 'bar').flatMap((s) => s.data.map(value)).filter((v) => v !== null);
  assert.deepEqual(weights.map((v) => v.toFixed(6)).sort(), ensemble.members.map((m) => m.weight.toFixed(6)).sort(),
                   'the members\' weights');
  const transfer = w.stages.find((s) => s.kind === 'transfer').view;
  const bars = series(await chart('transfer'), 'bar');
  const target = bars.find((s) => /target/i.test(s.name)), baseline = bars.find((s) => /baseline/i.test(s.name));
  assert.ok(target && baseline, 'target and baseline series');
  assert.deepEqual(target.data.map(value), transfer.pairs.map((q) => q.target_value), 'the targets\' values');
  assert.deepEqual(baseline.data.map(value), transfer.pairs.map((q) => q.baseline_value), 'the baselines\' values');

  const p = await api(`api/campaigns/${INDEX.pbt}/stages`);
  const tree = p.stages.find((s) => s.kind === 'pbt').view.tree;
  assert.ok(tree.length >= 4);
  await view(`/c/${INDEX.pbt}/stages`, 'stages');
  await shoot('stages-pbt');
  await chart('pbt');
  noProblems('stages');
});

// --- user strings are text -------------------------------------------------------------------------

async function noInjectedImage(where) {
  assert.equal(await page.locator('img[src="x"]').count(), 0, `${where}: an <img src=x> element exists`);
}

test('XSS: names, parameter values and error text render as text', { timeout: 40000 }, async () => {
  const i = INDEX.xss;
  const list = await api('api/campaigns');
  assert.equal(list.campaigns[i].name, XSS_NAME, 'the name as stored');

  await view('/', 'campaigns');
  assert.ok((await page.locator(`tr[data-index="${i}"]`).textContent()).includes(XSS_NAME), 'the name in the list');
  await noInjectedImage('campaigns');

  await view(`/c/${i}`, 'overview');
  await shoot('xss-overview');
  assert.equal(await figure('name'), XSS_NAME, 'the name on the overview');
  await noInjectedImage('overview');

  await view(`/c/${i}/trials`, 'trials');
  await shoot('xss-trials', true);
  const table = await page.locator('table#trials-table').textContent();
  assert.ok(table.includes(IMG) && table.includes(SCRIPT_END), 'parameter values in the trials table');
  await noInjectedImage('trials');

  const failed = (await api(`api/campaigns/${i}/trials?state=failed`)).trials[0];
  assert.ok(failed, 'a failed trial');
  const d = await api(`api/campaigns/${i}/trials/${failed.trial}`);
  assert.ok(d.error.includes(IMG) && d.error.includes(SCRIPT_END));
  await view(`/c/${i}/trials/${failed.trial}`, 'trial');
  await shoot('xss-trial', true);
  assert.ok((await page.locator('pre#trial-error').textContent()).includes(d.error), 'the error text as it is');
  const params = await page.locator('table#trial-params').textContent();
  assert.ok(params.includes(d.params.label), 'the categorical value on the trial page');
  for (const pre of await page.locator('pre.log-tail').all()) {
    const text = await pre.textContent();
    if (text.includes('label ')) assert.ok(text.includes(IMG), 'log lines as text');
  }
  await noInjectedImage('trial');

  // Tooltips (HTML in ECharts): one on each point of every chart of these views; the labels must
  // come out as text.
  const tips = [];
  for (const [hash, name] of [[`/c/${i}/params`, 'params'], [`/c/${i}/history`, 'history'], [`/c/${i}/curves`, 'curves'],
                              [`/c/${i}/timeline`, 'timeline']]) {
    await view(hash, name);
    tips.push(...await page.evaluate(async () => {
      const texts = [];
      for (const el of document.querySelectorAll('.chart')) {
        const inst = window.echarts.getInstanceByDom(el);
        const option = inst.getOption();
        for (let s = 0; s < option.series.length; ++s) {
          for (let d = 0; d < Math.min((option.series[s].data || []).length, 40); ++d) {
            try {
              inst.dispatchAction({ type: 'showTip', seriesIndex: s, dataIndex: d });
            } catch {
              break;  // a series without item tooltips (parallel)
            }
            await new Promise((r) => requestAnimationFrame(r));
            for (const tip of el.querySelectorAll('div')) {
              if (/z-index: ?9999999/.test(tip.getAttribute('style') || '')) texts.push(tip.textContent);
            }
          }
        }
        inst.dispatchAction({ type: 'hideTip' });
      }
      return texts;
    }));
    await noInjectedImage(`tooltips of ${name}`);
  }
  assert.ok(tips.some((t) => t.includes(IMG)), `a tooltip shows the value ${IMG} as text (${tips.length} tooltips)`);
  noProblems('xss');
});

// --- live updates ---------------------------------------------------------------------------------

test('the overview updates while a campaign runs', { timeout: 60000 }, async () => {
  const config = path.join(tmp, 'live.yaml');
  fs.writeFileSync(config, LIVE_CONFIG);
  const liveDb = path.join(tmp, 'live.db');
  const live = startHpctune(['run', config, '--db', liveDb, '--dashboard', '--dashboard-port', '0'], { cwd: tmp });
  try {
    const m = await waitForOutput(live, /dashboard: the live campaign at (http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})/,
                                  15000, 'hpctune run --dashboard');
    const origin = m[1];
    tokens[origin] = m[2];
    await view('/c/0', 'overview', origin);
    const first = number(await figure('count-done'));
    const o = await api('api/campaigns/0/overview', origin);
    assert.equal(o.state, 'running', 'the campaign is still running');
    assert.match(await page.locator('#live').textContent(), /live/i, 'the live badge');
    // A mark in the document: it survives only if nothing reloads the page.
    await page.evaluate(() => { window.__sameDocument = true; });
    await until(async () => number(await figure('count-done')) >= first + 2, 20000,
                `count-done growing from ${first} without navigation`);
    assert.equal(await page.evaluate(() => window.__sameDocument), true, 'no navigation happened');
    await shoot('live-overview');
    // Leave before the campaign ends: its server goes with it, and the app's polling would fail.
    await page.goto('about:blank');
    const status = await withDeadline(live.exited, 30000, 'the live campaign');
    assert.equal(status.code, 0, live.output);
    await until(() => processesMentioning(liveDb).length === 0, 5000, 'every process of the live campaign gone');
  } finally {
    await stop(live);
  }
  noProblems('live');
});
