// kqlab's anywidget views in marimo (issue 16): tests/browser/marimo_view.py shows the
// figure view (PlotlyFigure) and the rejection explorer's record table (RecordTable) through
// mo.ui.anywidget, served by `marimo run` on 127.0.0.1.  Assert that they render (the figure's
// SVG has its bar traces; the table lists a page of rows) and respond (a header click sorts
// through the kernel; a row click selects the record, and the kernel's explorer opens it —
// a reactive cell prints what the kernel holds).
import { test, expect } from '@playwright/test';

test('marimo: the figure and the record table render and respond', async ({ page }, testInfo) => {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('/');

  // the figure: plotly.js loaded from the shared model, bars drawn per reason
  const plot = page.locator('.kqlab-plot .js-plotly-plot').first();
  await expect(plot.locator('.main-svg .trace.bars').first()).toBeAttached({ timeout: 120_000 });
  const bars = await plot.locator('.main-svg .trace.bars').count();
  expect(bars).toBeGreaterThanOrEqual(2);            // culprits, collateral (and observed)
  expect(await plot.locator('.main-svg .trace.bars .point').count()).toBeGreaterThan(4);
  await expect(plot).toContainText('amount-range');
  await expect(plot).toContainText('broker:R4');

  // the table: one page of the refused records
  const table = page.locator('.kqlab-rt').first();
  const rows = table.locator('tr.kqlab-rt-row');
  await expect(rows.first()).toBeVisible({ timeout: 60_000 });
  expect(await rows.count()).toBe(20);                // the explorer's page size
  await expect(table.locator('.kqlab-rt-status')).toContainText(/records · page 1 of \d+/);
  const state = page.locator('.kqlab-marimo-state');
  await expect(state).toHaveAttribute('data-detail', '');
  await page.screenshot({ path: testInfo.outputPath('01-marimo.png') });

  // sort by time, latest first: the kernel answers with a new page, in that order
  const timeHeader = table.locator('th.kqlab-rt-time button');
  await timeHeader.click();
  await expect(table.locator('th.kqlab-rt-time')).toHaveAttribute('aria-sort', 'ascending',
    { timeout: 30_000 });
  await timeHeader.click();
  await expect(table.locator('th.kqlab-rt-time')).toHaveAttribute('aria-sort', 'descending',
    { timeout: 30_000 });
  await expect(state).toHaveAttribute('data-sort', 'timestamp:1', { timeout: 30_000 });
  await expect.poll(async () => {
    const times = await rows.locator('.kqlab-rt-time').allInnerTexts();
    return times.length > 1 && JSON.stringify([...times].sort().reverse()) === JSON.stringify(times);
  }, { timeout: 30_000 }).toBe(true);

  // a click selects: the row is marked, and the kernel's explorer holds that very record
  const row = rows.nth(3);
  const id = await row.getAttribute('data-id');
  await row.click();
  await expect(row).toHaveClass(/kqlab-rt-selected/, { timeout: 30_000 });
  await expect(state).toHaveAttribute('data-selected', id, { timeout: 60_000 });
  await expect(state).toHaveAttribute('data-detail', id, { timeout: 60_000 });
  const outcome = await row.getAttribute('data-outcome');
  await expect(state).toContainText(`(${outcome};`);
  await page.screenshot({ path: testInfo.outputPath('02-marimo-selected.png') });
  expect(errors).toEqual([]);
});
