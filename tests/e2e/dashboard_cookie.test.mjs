// The dashboard's token cookie in real headless Chromium (issue 21, finding 4): browsers do not
// scope cookies by port, so every server on 127.0.0.1 gets (and may set) the cookies of every
// other. Two `hpctune dashboard` servers over one campaign, on two ports, with the same --token
// (one user, two dashboards), and a hostile server of "another user" on a third port:
//   - the cookie that the first server set opens nothing on the second (its name carries the port);
//   - the hostile server sets a cookie of the first server's name with Path=/api (the browser then
//     sends it first), and the first server's app still works: every cookie of the name is checked.
// Run by ctest as test_dashboard_cookie_e2e, or: node tests/e2e/dashboard_cookie.test.mjs --binary build/hpctune
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test, after } from 'node:test';
import assert from 'node:assert/strict';

const here = path.dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.HPCTUNE_CHROMIUM || '/usr/bin/chromium';
const i = process.argv.indexOf('--binary');
const BINARY = path.resolve(i >= 0 ? process.argv[i + 1] : process.env.HPCTUNE_BINARY || path.join(here, '../../build/hpctune'));

let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  console.error(`test_dashboard_cookie_e2e: playwright-core is not installed in ${here}/node_modules (run tools/setup-deps): ${e.message}`);
  process.exit(1);
}
for (const [what, file] of [['chromium', CHROMIUM], ['the hpctune binary', BINARY]]) {
  if (!fs.existsSync(file)) {
    console.error(`test_dashboard_cookie_e2e: no ${what} at ${file}`);
    process.exit(1);
  }
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hpctune-cookie-'));
const children = new Set();
const killAll = () => { for (const c of children) { try { process.kill(c.pid, 'SIGKILL'); } catch { /* gone */ } } };
process.on('exit', () => { killAll(); fs.rmSync(tmp, { recursive: true, force: true }); });
setTimeout(() => { console.error('test_dashboard_cookie_e2e: still running after 120 s'); killAll(); process.exit(1); }, 120000).unref();

function start(args) {
  const child = spawn(BINARY, args, { cwd: tmp, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.output = '';
  child.stdout.on('data', (d) => { child.output += d; });
  child.stderr.on('data', (d) => { child.output += d; });
  child.on('exit', () => children.delete(child));
  return child;
}

async function waitFor(child, re, what) {
  const deadline = Date.now() + 15000;
  for (;;) {
    const m = child.output.match(re);
    if (m) return m;
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${what}: no ${re}:\n${child.output}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const TOKEN = 'shared-token-of-one-user-0123456789';
const HOSTILE = 'set-by-another-users-server-xxxx';
let browser, hostile;
after(async () => {
  if (browser) await browser.close().catch(() => {});
  if (hostile) hostile.close();
  killAll();
});

test('a dashboard cookie neither opens another port\'s dashboard nor is locked out by another server\'s', { timeout: 100000 }, async () => {
  const config = path.join(tmp, 'c.yaml');
  fs.writeFileSync(config, `name: cookie
seed: 1
objective: {metric: value, mode: min}
search: {algorithm: random, max_trials: 4}
space:
  x1: {type: float, low: -5, high: 10}
  x2: {type: float, low: 0, high: 15}
trainer: {kind: function, name: branin}
`);
  const db = path.join(tmp, 'c.db');
  execFileSync(BINARY, ['run', config, '--db', db], { cwd: tmp, stdio: 'ignore', timeout: 60000 });

  const a = start(['dashboard', db, '--port', '0', '--token', TOKEN]);
  const b = start(['dashboard', db, '--port', '0', '--token', TOKEN]);
  const baseA = (await waitFor(a, /at (http:\/\/127\.0\.0\.1:\d+\/)/, 'dashboard A'))[1];
  const baseB = (await waitFor(b, /at (http:\/\/127\.0\.0\.1:\d+\/)/, 'dashboard B'))[1];
  const portA = new URL(baseA).port;

  // Another user's server on this host: it sets cookies of dashboard A's names (old and new) on a
  // longer path, so that the browser sends them first.
  hostile = http.createServer((req, res) => {
    res.setHeader('Set-Cookie', [`hpctune_token_${portA}=${HOSTILE}; Path=/api`, `hpctune_token=${HOSTILE}; Path=/api`]);
    res.setHeader('Content-Type', 'text/html');
    res.end('<p>nothing to see</p>');
  });
  await new Promise((r) => hostile.listen(0, '127.0.0.1', r));
  const hostileUrl = `http://127.0.0.1:${hostile.address().port}/`;

  browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const ready = () => page.waitForSelector('section#view-overview[data-ready="1"]');

  // Each failure is kept and all are said at the end.
  const failures = [];
  // A opened as printed: the cookie it sets is named by its port, HttpOnly, SameSite=Strict.
  await page.goto(`${baseA}?token=${TOKEN}#/c/0`);
  await ready();
  const cookies = await context.cookies(baseA);
  const mine = cookies.find((c) => c.value === TOKEN);
  assert.ok(mine, `a cookie with the token: ${JSON.stringify(cookies)}`);
  if (mine.name !== `hpctune_token_${portA}`) failures.push(`the cookie is named ${mine.name}, not by the port`);
  assert.equal(mine.httpOnly, true);
  assert.equal(mine.sameSite, 'Strict');

  // B on another port (same host, same token): the browser sends it A's cookie, which opens nothing.
  const atB = await page.goto(`${baseB}#/c/0`);
  if (atB.status() !== 401) failures.push(`the cookie of the dashboard on another port opened this one (HTTP ${atB.status()})`);

  // The hostile server sets its cookies; A's app still loads and every API answer is 200.
  await page.goto(hostileUrl);
  const names = (await context.cookies(`${baseA}api/campaigns`)).map((c) => `${c.name}=${c.value}; path ${c.path}`);
  assert.ok(names.some((n) => n.startsWith(`hpctune_token_${portA}=${HOSTILE}`)), `the hostile cookie is set: ${names}`);
  const refused = [];
  page.on('response', (r) => { if (r.url().startsWith(baseA) && r.status() === 401) refused.push(r.url()); });
  await page.goto(`${baseA}#/c/0`);
  await ready().catch(() => failures.push('the overview never became ready'));
  if (refused.length) failures.push(`locked out by the other server's cookie: ${refused.join(', ')} answered 401`);
  assert.deepEqual(failures, []);
});
