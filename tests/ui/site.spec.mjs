// The documentation site at a laptop's width (1280 px), in Debian's headless chromium:
// for each page given, whether anything is wider than the page (a code block that hides
// its right side counts: its content is wider than its box) and, on the REST page, whether
// a route's path breaks across lines. Prints one JSON line.
import { chromium } from "playwright-core";

const { SITE_URL, PAGES } = process.env;
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox"],
});
try {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } }))
    .newPage();
  const out = {};
  for (const path of PAGES.split(",")) {
    await page.goto(`${SITE_URL}/${path}`);
    out[path] = await page.evaluate(() => {
      const width = document.documentElement.clientWidth;
      const wide = [];
      for (const el of document.querySelectorAll(".md-content pre, .md-content table")) {
        // a program's source (highlighted: its tokens are spans) scrolls sideways as in
        // any editor; a diagram, plain text or a table must show all of itself
        const box = el.querySelector("code") || el;
        if (el.tagName === "PRE" && box.querySelector("span")) continue;
        if (box.scrollWidth > box.clientWidth + 1 || el.getBoundingClientRect().right > width)
          wide.push(el.tagName + ": " + el.textContent.trim().slice(0, 60));
      }
      const broken = [];
      for (const code of document.querySelectorAll(".md-content td code")) {
        // an inline box broken across lines has a rectangle per line
        if (code.textContent.startsWith("/") && code.getClientRects().length > 1)
          broken.push(code.textContent);
      }
      return { page_width: document.documentElement.scrollWidth, width, wide, broken };
    });
  }
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
