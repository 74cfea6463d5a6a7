// Sample checks in a real JupyterLab (issue 21): notebook 08 run in the page, its ChecksPanel
// drawn (status per check, the sparklines), a threshold typed into the panel re-judges the
// check at once — the page's status cell and the kernel's policy agree.
// The panel's stable CSS classes are documented in kqlab.widgets.CHECKS_CSS.
import { test, expect } from '@playwright/test';

import { kernelEval, runAllCells } from './_jupyter.mjs';

const NOTEBOOK = '08_sample_checks.ipynb';

test.beforeEach(async ({ request }) => {
  for (const s of await (await request.get('/api/sessions')).json()) {
    await request.delete(`/api/sessions/${s.id}`);
  }
});

test('checks panel: statuses and sparklines, a typed threshold re-judges the check',
  async ({ page }, testInfo) => {
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`/lab/tree/${NOTEBOOK}?reset`);
    await expect(page.locator('.jp-StatusBar-Widget', { hasText: /\| Idle/ }).first())
      .toBeVisible({ timeout: 90_000 });
    await runAllCells(page, 'kind: volume');

    const panel = page.locator('.kqlab-checks').first();
    await panel.scrollIntoViewIfNeeded();
    await expect(panel).toBeVisible();
    const status = panel.locator('.kqlab-check-status-customer-set');
    await expect(status).toHaveText('fail');
    await expect(panel.locator('.kqlab-check-status-dup-keys')).toHaveText('pass');
    // one plotly figure with a small panel per check
    await expect(panel.locator('.kqlab-check-sparklines .main-svg').first()).toBeVisible();
    await page.screenshot({ path: testInfo.outputPath('01-checks-panel.png') });

    // choose the null-rate check and type a looser max: the status follows at once
    await panel.locator('.kqlab-check-select select').selectOption('customer-set');
    const box = panel.locator('.kqlab-check-threshold-max input');
    await expect(box).toHaveValue('0.01');
    await box.fill('0.05');
    await box.press('Enter');
    await expect(status).toHaveText('pass', { timeout: 30_000 });
    expect(await kernelEval(page,
      'print(session.policy.check("customer-set").params["max"], ' +
      'next(r["status"] for r in session.checks if r["check"] == "customer-set"))'))
      .toBe('0.05 pass');
    await page.screenshot({ path: testInfo.outputPath('02-threshold-typed.png') });
    expect(errors).toEqual([]);
  });
