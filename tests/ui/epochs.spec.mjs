// The Epochs page inside the Airflow UI, in Debian's headless chromium: sign in (the same
// session cookie the Airflow UI uses), open the DAG's "Epochs" tab, check the table and the
// charts and the lineage timeline, open an epoch, preview backfills from the form (one that
// may start, one that would rewind), take a savepoint, and take a screenshot. Prints one
// JSON line.
import { chromium } from "playwright-core";

const { AIRFLOW_URL, DAG_ID, USERNAME, PASSWORD, SCREENSHOT, SCREENSHOT_DARK, EPOCH_ID,
  PREVIEW_FROM, PREVIEW_FIRST, PREVIEW_LAST, REWIND_LAST, RETRIED_EPOCH_ID } = process.env;

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox"],
});
try {
  // A laptop's width: the page must fit it without scrolling sideways.
  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const page = await context.newPage();
  // Liveness bounds, not speed targets: on a busy host the Airflow UI's scripts take tens
  // of seconds to load, past Playwright's 30 s defaults.
  page.setDefaultNavigationTimeout(120000);
  page.setDefaultTimeout(90000);
  // Sign in through Airflow's own login form.
  await page.goto(`${AIRFLOW_URL}/auth/login`);
  await page.locator("input[name=username], input#username").first().fill(USERNAME);
  await page.locator("input[type=password]").first().fill(PASSWORD);
  await page.locator("button[type=submit]").first().click();
  // Signed in once the browser has left the login page; its next page need not have loaded.
  await page.waitForURL((url) => !url.pathname.startsWith("/auth/login"),
    { waitUntil: "commit" });

  // The plugin's external view: the "Epochs" tab of the DAG page, an iframe of our page.
  await page.goto(`${AIRFLOW_URL}/dags/${DAG_ID}`);
  await page.locator(`a[href$="/dags/${DAG_ID}/plugin/epochs"]`).first().click();
  const frameEl = page.locator(`iframe[src*="/ckpt/ui/${DAG_ID}"]`);
  await frameEl.waitFor();
  const frame = page.frameLocator(`iframe[src*="/ckpt/ui/${DAG_ID}"]`);
  const rows = frame.locator("#epochs tbody tr");
  await rows.first().waitFor();
  const rowCount = await rows.count();
  // The header: completed and failed epochs, the last completed epoch's age.
  const header = { completed: await frame.locator("#count-completed").textContent(),
    failed: await frame.locator("#count-failed").textContent(),
    age: await frame.locator("#latest-age").textContent() };
  // The "Tables published" column of each row, epoch id -> text.
  const tablesCells = await frame.locator("#epochs tbody tr").evaluateAll((trs) =>
    Object.fromEntries(trs.map((tr) => [tr.dataset.epochId, tr.querySelector("td.tables")?.textContent ?? null])));

  // The "Run" column: what tells the runs apart (the kind's icon and the logical date),
  // as shown (the cell's visible width) and on hover.
  const runCells = await frame.locator("#epochs tbody tr").evaluateAll((trs) =>
    Object.fromEntries(trs.map((tr) => {
      const td = tr.querySelector("td.run");
      return [tr.dataset.epochId, { text: td?.textContent ?? null, title: td?.title ?? null,
        cut: td ? td.scrollWidth > td.clientWidth : null }];
    })));
  // The "Tries" column: the highest attempt of any task of each epoch.
  const attemptsCells = await frame.locator("#epochs tbody tr").evaluateAll((trs) =>
    Object.fromEntries(trs.map((tr) => [tr.dataset.epochId, tr.querySelector("td.attempts")?.textContent ?? null])));
  // The status line under the title takes no room while it is empty.
  const messageHeight = await frame.locator("#message").evaluate((el) =>
    el.textContent === "" ? el.getBoundingClientRect().height : -1);

  // Open the oldest epoch: its per-task table.
  await frame.locator(`#epochs tbody tr[data-epoch-id="${EPOCH_ID}"]`).click();
  await frame.locator("#tasks tbody tr").first().waitFor();
  const taskRows = await frame.locator("#tasks tbody tr").count();
  const chartPoints = Number(await frame.locator("#chart-duration").getAttribute("data-points"));
  const timelineBars = Number(await frame.locator("#timeline").getAttribute("data-bars"));
  // The selected row and the detail show one read of the epoch (the row is redrawn from it).
  const selectedRow = await frame.locator("#epochs tbody tr.selected").evaluateAll((trs) =>
    trs.map((tr) => ({ id: tr.dataset.epochId, status: tr.children[2].textContent,
      acked: tr.children[5].textContent })));
  const detailStatus = (await frame.locator("#detail-status").textContent()).split(" · ")[0];
  const stale = await frame.locator("#stale").evaluate((el) => (el.hidden ? null : el.textContent));
  const detailAcked = await frame.locator("#tasks tbody tr").evaluateAll((trs) =>
    trs.filter((tr) => tr.children[1].textContent === "acked").length);

  // Sideways scrolling at 1280 px: the page's document, its epochs and tasks tables, and
  // Airflow's page around it (pixels of content beyond the visible width).
  const overflow = await frame.locator("html").evaluate((html) => {
    const over = (el) => el.scrollWidth - el.clientWidth;
    return { page: over(html), epochs: over(document.getElementById("epochs")),
      tasks: over(document.getElementById("tasks")) };
  });
  overflow.airflow = await page.evaluate(() =>
    document.documentElement.scrollWidth - document.documentElement.clientWidth);

  // An epoch whose task was retried: its failed try on the task timeline.
  let failedTries = null;
  // The detail of epoch `id` is drawn (its id, tasks and timeline are set together once its
  // read returns): a wait on the rows alone would read the previous epoch's.
  const detailOf = (id) => frame.locator("#detail-id").filter({ hasText: new RegExp(`^${id}$`) }).waitFor();
  if (RETRIED_EPOCH_ID) {
    await frame.locator(`#epochs tbody tr[data-epoch-id="${RETRIED_EPOCH_ID}"]`).click();
    await detailOf(RETRIED_EPOCH_ID);
    await frame.locator("#timeline rect.failed-try").first().waitFor();
    failedTries = await frame.locator("#timeline rect.failed-try").evaluateAll((rs) =>
      rs.map((r) => [r.dataset.task, r.dataset.attempt]));
    await frame.locator(`#epochs tbody tr[data-epoch-id="${EPOCH_ID}"]`).click();
    await detailOf(EPOCH_ID);
    await frame.locator("#tasks tbody tr").first().waitFor();
  }

  const lineages = await frame.locator("#lineages").evaluate((svg) => ({ ...svg.dataset }));
  // What the page shows, for the defects it must not have: which epoch each task restored
  // from; no cell wrapping (a row's height is one line's); chart ticks that say something
  // and a unit label clear of them; a disabled button that looks disabled.
  const restoredFrom = await frame.locator("#tasks tbody td.restored-from").allTextContents();
  const snapshots = await frame.locator("#tasks tbody tr").evaluateAll((trs) =>
    Object.fromEntries(trs.map((tr) => [tr.dataset.task, tr.querySelector("td.snapshot").textContent])));
  const sizes = await frame.locator("#detail-sizes").textContent();
  const rowHeights = await frame.locator("#epochs tbody tr").evaluateAll((trs) =>
    trs.map((tr) => tr.getBoundingClientRect().height));
  const charts = await frame.locator("svg#chart-duration, svg#chart-size").evaluateAll((svgs) =>
    svgs.map((svg) => {
      const ticks = [...svg.querySelectorAll("text.tick:not(.unit)")];
      const unit = svg.querySelector("text.unit").getBoundingClientRect();
      const overlaps = ticks.filter((t) => {
        const r = t.getBoundingClientRect();
        return !(r.right < unit.left || r.left > unit.right || r.bottom < unit.top || r.top > unit.bottom);
      }).length;
      const fullFailed = [...svg.querySelectorAll("rect.novalue")].filter(
        (r) => Number(r.getAttribute("height")) > 10).length;
      return { ticks: ticks.map((t) => t.textContent), overlaps, fullFailed };
    }));
  const failedTask = await frame.locator("#epochs tbody td.failed-task").allTextContents();
  const disabledOpacity = await frame.locator("#backfill-submit").evaluate(
    (b) => getComputedStyle(b).opacity);

  // The backfill form: a preview from a savepoint enables Start; a last day behind what is
  // published is a rewind, shown as a conflict, and Start stays disabled.
  const form = frame.locator("#backfill-form");
  const out = frame.locator("#backfill-preview-out");
  const submit = frame.locator("#backfill-submit");
  await form.locator("select[name=from_savepoint]").selectOption(PREVIEW_FROM);
  await form.locator("input[name=first_day]").fill(PREVIEW_FIRST);
  await form.locator("input[name=last_day]").fill(PREVIEW_LAST);
  const disabledBefore = await submit.isDisabled();
  await frame.locator("#backfill-preview").click();
  await out.filter({ hasText: /reads data day/ }).waitFor();
  const preview = (await out.textContent()).trim();
  const startEnabled = await submit.isEnabled();
  await form.locator("input[name=last_day]").fill(REWIND_LAST);
  const disabledOnEdit = await submit.isDisabled();
  await frame.locator("#backfill-preview").click();
  await out.filter({ hasText: /conflict:/ }).waitFor();
  const rewindPreview = (await out.textContent()).trim();
  const startAfterRewind = await submit.isEnabled();

  // Take a savepoint of the selected epoch from the page.
  await frame.locator("#take-savepoint").click();
  const message = frame.locator("#message");
  await message.filter({ hasText: /savepoint/ }).waitFor();
  const savepointMessage = (await message.textContent()).trim();

  await page.screenshot({ path: SCREENSHOT, fullPage: true });

  // Trigger a run from the page (Airflow's REST API, with the same session), with the
  // logical date the page proposes (the next data day).
  const triggerDate = await frame.locator("#trigger-date").inputValue();
  await frame.locator("#trigger-conf").fill('{"checkpoint": {"enabled": true}}');
  await frame.locator("#trigger-run").click();
  await message.filter({ hasText: /triggered run|trigger failed/ }).waitFor();
  const triggerMessage = (await message.textContent()).trim();

  // Airflow in dark mode (its stored theme): the page follows.
  await page.evaluate(() => window.localStorage.setItem("theme", "dark"));
  await page.reload();
  const dark = page.frameLocator(`iframe[src*="/ckpt/ui/${DAG_ID}"]`);
  await dark.locator("#epochs tbody tr").first().waitFor();
  const theme = await dark.locator("html").getAttribute("data-theme");
  const background = await dark.locator("body").evaluate((b) => getComputedStyle(b).backgroundColor);
  if (SCREENSHOT_DARK) await page.screenshot({ path: SCREENSHOT_DARK, fullPage: true });

  console.log(JSON.stringify({ header, snapshots, sizes, rows: rowCount, tables: tablesCells, attempts: attemptsCells,
    runs: runCells, stale,
    message_height: messageHeight, task_rows: taskRows,
    restored_from: restoredFrom, row_heights: rowHeights,
    selected: { rows: selectedRow, detail_status: detailStatus, detail_acked: detailAcked,
      task_rows: taskRows }, charts, failed_task: failedTask,
    disabled_opacity: disabledOpacity, chart_points: chartPoints,
    savepoint_message: savepointMessage, trigger_message: triggerMessage,
    trigger_date: triggerDate, theme, background, timeline_bars: timelineBars, lineages,
    overflow, failed_tries: failedTries,
    preview, rewind_preview: rewindPreview,
    start: { before_preview: !disabledBefore, after_preview: startEnabled,
      after_edit: !disabledOnEdit, after_rewind_preview: startAfterRewind } }));
} finally {
  await browser.close();
}
