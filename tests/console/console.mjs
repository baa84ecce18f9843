// Drives the lakegate web console in headless Chromium (Debian's, via playwright-core):
// loads every page, records console errors, reads the estate and a table page, saves
// screenshots, then checks the snapshot lag resets after a commit (stdin says when).
//
//   node console.mjs BASE_URL TABLE OUT_DIR
// Prints JSON lines: {"phase":"pages",...}, {"phase":"before",...}; waits for a line on stdin
// (the test commits), then prints {"phase":"after",...}.
import { createInterface } from "node:readline";
import path from "node:path";

const core = process.env.PLAYWRIGHT_CORE;
const { chromium } = await import(core);
const [, , base, table, outDir] = process.argv;
const REFRESH = 1000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const errors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  // Requests cut short by navigating away are not errors; any other failure is.
  page.on("requestfailed", (r) => {
    if (!String(r.failure()?.errorText).includes("ERR_ABORTED")) errors.push(`request failed: ${r.url()}`);
  });
  page.on("response", (r) => { if (r.status() >= 400) errors.push(`HTTP ${r.status()}: ${r.url()}`); });
  const loaded = (name) => page.waitForFunction((n) => document.body.dataset.loaded === n, name,
                                                { timeout: 20000 });
  const shot = (name) => page.screenshot({ path: path.join(outDir, `console-${name}.png`), fullPage: true });

  await page.goto(`${base}/?refresh=${REFRESH}#/`);
  await loaded("estate");
  await page.waitForSelector("[data-testid=estate] tbody tr");
  const tables = await page.$$eval("[data-testid=estate] tbody tr", (trs) => trs.map((t) => t.dataset.table));
  await shot("estate");

  await page.click(`a[href="#/table/${encodeURIComponent(table)}"]`);
  await loaded("table");
  await page.waitForSelector("[data-testid=partitions] tbody tr");
  const partitions = await page.$$eval("[data-testid=partitions] tbody tr",
    (trs) => trs.map((t) => t.innerText.split("\t")[0].trim()));
  const operations = await page.$$eval("[data-testid=operations] tbody tr",
    (trs) => trs.map((t) => t.innerText));
  await shot("table");

  const others = {};
  for (const p of ["routing", "cache", "queries", "approvals"]) {
    await page.goto(`${base}/?refresh=${REFRESH}#/${p}`);
    await loaded(p);
    others[p] = (await page.innerText("#view")).length;
    await shot(p);
  }
  console.log(JSON.stringify({ phase: "pages", tables, partitions, operations, others, errors }));

  // Freshness: the lag on the table page, before and after a commit.
  await page.goto(`${base}/?refresh=${REFRESH}#/table/${encodeURIComponent(table)}`);
  await loaded("table");
  await page.waitForTimeout(2500);
  const lag = async () => Number(await page.getAttribute("[data-testid=snapshot-lag]", "data-seconds"));
  console.log(JSON.stringify({ phase: "before", lag: await lag() }));
  const rl = createInterface({ input: process.stdin });
  await new Promise((resolve) => rl.once("line", resolve));
  rl.close();
  await page.waitForTimeout(REFRESH + 800); // one refresh (and the request's own time)
  console.log(JSON.stringify({ phase: "after", lag: await lag(), errors }));
} finally {
  await browser.close();
}
