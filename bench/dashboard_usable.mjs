// bench/dashboard_usable.mjs URL VIEWS REPEAT: how long after navigation each view of the dashboard
// is usable (its section says data-ready="1"), in real headless Chromium driven by playwright-core
// (installed in tests/e2e by tools/setup-deps). VIEWS: comma-separated names of campaign 0's views
// (overview, history, ...); each is opened REPEAT times in a new browser context (no cache).
// Prints {runs_ms: {view: [...]}, median_ms: {view: m}} as JSON.
// VIEWS = "watch": launches the browser, prints "launched", opens campaign 0's overview as soon as
// URL answers (prints "opened") and keeps it open (the app polls and redraws) until SIGTERM; for
// the master-rate measurement. URL "-": the first line of standard input (the URL a run prints,
// with its token, once its dashboard has started).
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "tests", "e2e", "package.json"));
const { chromium } = require("playwright-core");

const [url, views, repeatText] = process.argv.slice(2);
if (!url || !views) {
  console.error("usage: dashboard_usable.mjs URL VIEWS REPEAT");
  process.exit(2);
}
const repeat = Math.max(1, Number(repeatText || 5));
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
const hash = (view) => (view === "overview" ? "#/c/0" : `#/c/0/${view}`);
try {
  if (views === "watch") {
    // Launched before the campaign starts (the browser's start-up is not the dashboard's cost):
    // say so, then open the overview as soon as the server answers, and keep it open.
    let stop = false;
    const stopped = new Promise((resolve) => {
      process.on("SIGTERM", () => { stop = true; resolve(); });
      process.on("SIGINT", () => { stop = true; resolve(); });
    });
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
    console.log("launched");
    let target = url;
    if (url === "-") {
      const { createInterface } = await import("node:readline");
      const lines = createInterface({ input: process.stdin });
      target = await Promise.race([new Promise((r) => lines.once("line", r)), stopped.then(() => null)]);
      lines.close();
      if (target === null) stop = true;
    }
    while (!stop) {
      try {
        await page.goto(target + hash("overview"), { timeout: 5000 });
        console.log("opened");
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    await stopped;
  } else {
    const out = { runs_ms: {}, median_ms: {} };
    for (const view of views.split(",")) {
      out.runs_ms[view] = [];
      for (let i = 0; i < repeat; ++i) {
        const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
        const page = await context.newPage();
        const t0 = performance.now();
        await page.goto(url + hash(view));
        await page.waitForSelector(`section#view-${view}[data-ready="1"]`, { timeout: 30000 });
        out.runs_ms[view].push(performance.now() - t0);
        await context.close();
      }
      const s = [...out.runs_ms[view]].sort((a, b) => a - b);
      out.median_ms[view] = s[Math.floor(s.length / 2)];
    }
    console.log(JSON.stringify(out));
  }
} finally {
  await browser.close();
}
