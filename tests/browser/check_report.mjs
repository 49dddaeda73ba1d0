// Open a report.html in headless Chromium and say, as one JSON object on stdout, what a reader sees.
//
//   node tests/browser/check_report.mjs REPORT_HTML SCREENSHOT_PNG
//
// The Chromium build is @sparticuz/chromium (a headless shell shipped inside the npm package, with
// the libraries it needs), driven by puppeteer-core; both are installed by `make install` into
// tests/browser/node_modules. This script only observes: the judgement is in
// tests/test_report_browser.py, which runs it and reads its JSON.
//
// Output fields: stage ("executable" or "launch" when Chromium could not be had or started, with
// error; "done" otherwise), console (every console message: type, text, location), pageErrors
// (uncaught exceptions), failedRequests, externalRequests (anything not data: or file:),
// images (alt, src kind, complete, naturalWidth/Height, decoded or the decode error, rendered
// box), headings (h1/h2 texts), recommendation (metric name -> value of the recommendation card),
// candidates (headers and cell texts of the table under the "Candidates" heading), figures
// (caption and rendered box of each plot), screenshot (its path), title.

import chromium from "@sparticuz/chromium";
import puppeteer from "puppeteer-core";
import { pathToFileURL } from "node:url";

const [htmlPath, screenshotPath] = process.argv.slice(2);
if (!htmlPath || !screenshotPath) {
  process.stderr.write("usage: node check_report.mjs REPORT_HTML SCREENSHOT_PNG\n");
  process.exit(2);
}

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

chromium.setGraphicsMode = false; // no WebGL: a report has no use for it, and it starts faster

let executablePath;
try {
  executablePath = await chromium.executablePath();
} catch (error) {
  emit({ stage: "executable", error: String(error && error.stack ? error.stack : error) });
  process.exit(0);
}

// @sparticuz/chromium's defaults switch web security off (its users scrape pages); a report is
// checked as a reader's browser would open it, so keep the same-origin rules on.
const relaxed = new Set(["--disable-web-security", "--allow-running-insecure-content"]);
const args = chromium.args.filter((a) => !relaxed.has(a));

let browser;
try {
  browser = await puppeteer.launch({
    executablePath,
    args: puppeteer.defaultArgs({ args, headless: "shell" }),
    headless: "shell",
    defaultViewport: { width: 1280, height: 900, deviceScaleFactor: 1 },
  });
} catch (error) {
  emit({ stage: "launch", executablePath, error: String(error && error.stack ? error.stack : error) });
  process.exit(0);
}

const result = {
  stage: "done",
  executablePath,
  browserVersion: await browser.version(),
  console: [],
  pageErrors: [],
  failedRequests: [],
  externalRequests: [],
};

try {
  const page = await browser.newPage();
  page.on("console", (msg) =>
    result.console.push({ type: msg.type(), text: msg.text(), location: msg.location() }),
  );
  page.on("pageerror", (error) => result.pageErrors.push(String(error)));
  page.on("requestfailed", (req) =>
    result.failedRequests.push({ url: req.url().slice(0, 200), error: req.failure()?.errorText ?? null }),
  );
  page.on("request", (req) => {
    const url = req.url();
    if (!url.startsWith("data:") && !url.startsWith("file:")) result.externalRequests.push(url.slice(0, 200));
  });

  await page.goto(pathToFileURL(htmlPath).href, { waitUntil: "load", timeout: 60000 });

  Object.assign(
    result,
    await page.evaluate(async () => {
      const box = (el) => {
        const r = el.getBoundingClientRect();
        return { width: r.width, height: r.height };
      };
      const text = (el) => (el ? el.textContent.replace(/\s+/g, " ").trim() : null);
      const images = await Promise.all(
        [...document.images].map(async (img) => {
          let decoded = true;
          let decodeError = null;
          try {
            await img.decode();
          } catch (error) {
            decoded = false;
            decodeError = String(error);
          }
          return {
            alt: img.alt,
            src: img.src.startsWith("data:") ? img.src.slice(0, img.src.indexOf(",")) : img.src.slice(0, 200),
            complete: img.complete,
            naturalWidth: img.naturalWidth,
            naturalHeight: img.naturalHeight,
            decoded,
            decodeError,
            box: box(img),
          };
        }),
      );
      const h2s = [...document.querySelectorAll("h2")];
      const recHeading = h2s.find((h) => text(h) === "Recommendation");
      const recommendation = {};
      if (recHeading) {
        for (const metric of recHeading.closest("section").querySelectorAll(".metric")) {
          recommendation[text(metric.querySelector(".k"))] = text(metric.querySelector(".v"));
        }
      }
      const candHeading = h2s.find((h) => text(h) === "Candidates");
      let candidates = null;
      if (candHeading) {
        let el = candHeading.nextElementSibling;
        while (el && !el.querySelector("table") && el.tagName !== "TABLE" && el.tagName !== "H2") {
          el = el.nextElementSibling;
        }
        const table = el && (el.tagName === "TABLE" ? el : el.querySelector("table"));
        if (table) {
          candidates = {
            headers: [...table.querySelectorAll("thead th")].map(text),
            rows: [...table.querySelectorAll("tbody tr")].map((tr) => ({
              cells: [...tr.querySelectorAll("td")].map(text),
              classes: tr.className,
              box: box(tr),
            })),
          };
        }
      }
      const figures = [...document.querySelectorAll("figure")].map((f) => ({
        caption: text(f.querySelector("figcaption")),
        alt: f.querySelector("img")?.alt ?? null,
        box: box(f),
      }));
      return {
        title: document.title,
        headings: [...document.querySelectorAll("h1, h2")].map((h) => ({ tag: h.tagName, text: text(h) })),
        images,
        recommendation: recHeading ? recommendation : null,
        candidates,
        figures,
      };
    }),
  );
  await page.screenshot({ path: screenshotPath, fullPage: true });
  result.screenshot = screenshotPath;
} catch (error) {
  result.stage = "page";
  result.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
emit(result);
