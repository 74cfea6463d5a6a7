// The quickstart notebook in Notebook 7 (the `notebook` package's single-document UI at
// /notebooks/...), issue 16: the same widgets as in JupyterLab, since the figure view and the
// record table are anywidgets and the rest is ipywidgets.  Run every cell; the workbench
// renders (the reasons figure's SVG has its bars, the explorer's table lists rows); it
// responds (a row click selects the record and opens its detail, Undo re-judges and the
// figure redraws exactly the kernel's figure).  It also takes the README's screenshot of the
// workbench (readme-workbench.png; tests/browser/test_notebook7.py keeps it small).
import { test, expect } from '@playwright/test';

import { count, kernelEval, runAllCells } from './_jupyter.mjs';

const NOTEBOOK = 'notebook7/01_quickstart.ipynb';   // a copy of its own (conftest.py)

test.beforeEach(async ({ request }) => {
  // the server keeps one kernel per notebook path: start from a fresh one
  for (const s of await (await request.get('/api/sessions')).json()) {
    await request.delete(`/api/sessions/${s.id}`);
  }
});

// Notebook 7 has no status bar: ask the app (expose_app_in_browser) for the kernel's state.
async function kernelIdle(page) {
  await page.waitForFunction(() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return k && k.status === 'idle';
  }, null, { timeout: 90_000 });
}

// Notebook 7.6's own shell throws this once while it loads its settings, on any page (the
// file browser at /tree with no notebook open and an empty settings folder too): its keyboard
// shortcuts plugin reads the schema of a plugin the page does not have.  It comes from the
// notebook package's core bundle, never from a widget (those run from the widget manager's
// and anywidget's modules), so only that exact error from that bundle is let through.
function notebookShellError(e) {
  return String(e) === "TypeError: Cannot read properties of undefined (reading 'schema')" &&
    /\/static\/notebook\/notebook_core\.[0-9a-f]+\.js/.test(String(e.stack).split('\n')[1] || '');
}

test('notebook 7: the quickstart runs, its workbench renders and responds',
  async ({ page }, testInfo) => {
    const errors = [];
    page.on('pageerror', (e) => {
      if (!notebookShellError(e)) errors.push(`${e}\n${e.stack}`);
    });
    const shot = (name) => page.screenshot({ path: testInfo.outputPath(name), fullPage: false });

    await page.goto(`/notebooks/${NOTEBOOK}`);
    await expect(page.locator('.jp-NotebookPanel')).toBeVisible({ timeout: 90_000 });
    expect(await page.locator('.jp-LabShell').count()).toBe(0);     // not JupyterLab's shell
    await kernelIdle(page);
    await runAllCells(page, 'static report:');

    const wb = page.locator('.kqlab-workbench').first();
    await wb.scrollIntoViewIfNeeded();
    await expect(wb).toBeVisible();
    const editor = wb.locator('.kqlab-policy-editor');
    const amountShown = count(await editor.locator('.kqlab-rule-count-amount-range').innerText());
    expect(amountShown).toBe(Number(await kernelEval(page,
      'print(wb.editor.counts["amount-range"]["failed"])')));
    await shot('01-notebook7.png');

    // the figures render: the reasons figure's SVG holds one bar trace per outcome kind, with
    // a bar per reason, and names the rule the notebook edited
    await wb.locator('.lm-TabBar-tab', { hasText: 'Figures' }).first().click();
    const figures = wb.locator('.kqlab-figures').last();
    await expect(figures.locator('.js-plotly-plot')).toHaveCount(3, { timeout: 60_000 });
    const reasons = figures.locator('.js-plotly-plot').first();
    await expect(reasons.locator('.main-svg .trace.bars').first()).toBeAttached({ timeout: 60_000 });
    expect(await reasons.locator('.main-svg .trace.bars .point').count()).toBeGreaterThan(3);
    await expect(reasons).toContainText('amount-range');
    const drawn = async () => JSON.parse(await reasons.evaluate((gd) => JSON.stringify(
      gd._fullData.map((t) => [t.name, Array.from(t.x || []).reduce((a, b) => a + Number(b), 0),
                               Array.from(t.y || []).join('|')]))));
    const inKernel = async () => JSON.parse(await kernelEval(page,
      'import json; print(json.dumps([[t.name, float(sum(() if t.x is None else t.x)), ' +
      '"|".join(map(str, () if t.y is None else t.y))] for t in wb.figures["reasons"].data]))'));
    const edited = await inKernel();
    await expect.poll(drawn, { timeout: 60_000 }).toEqual(edited);

    // the table lists rows; a click selects one and the kernel opens its detail
    await wb.locator('.lm-TabBar-tab', { hasText: 'Rejections' }).first().click();
    const explorer = wb.locator('.kqlab-rejection-explorer');
    const rows = explorer.locator('.kqlab-rejected-table tr.kqlab-rt-row');
    await expect(rows.first()).toBeVisible({ timeout: 60_000 });
    const shownRows = await rows.count();
    expect(shownRows).toBe(Number(await kernelEval(page, 'print(len(wb.explorer.rows))')));
    expect(shownRows).toBeGreaterThan(1);
    const row = rows.nth(1);
    const [partition, offset] = [await row.getAttribute('data-partition'),
                                 await row.getAttribute('data-offset')];
    await row.click();
    await expect(row).toHaveClass(/kqlab-rt-selected/, { timeout: 30_000 });
    const detail = explorer.locator('.kqlab-record-detail');
    await expect(detail).toContainText(`-${partition} @ ${Number(offset).toLocaleString('en-US')}`,
      { timeout: 60_000 });
    expect(await kernelEval(page,
      `d = wb.explorer.detail; print(d.partition == ${partition} and d.offset == ${offset})`))
      .toBe('True');

    // Undo in the page: the notebook's edit is taken back, the outcomes and the figure follow
    await wb.locator('.lm-TabBar-tab', { hasText: 'Policy' }).first().click();
    const outcomes = editor.locator('.kqlab-outcomes');
    const before = await outcomes.innerText();
    await editor.locator('.kqlab-undo').click();
    await expect(outcomes).not.toHaveText(before, { timeout: 60_000 });
    const kernel = JSON.parse(await kernelEval(page,
      'import json; print(json.dumps([wb.policy == policy, ' +
      'wb.verdicts.by_outcome() == kqlab.replay(orders, policy, now=NOW).by_outcome()]))'));
    expect(kernel).toEqual([true, true]);      // the shipped policy again, and its verdicts
    expect(count(await editor.locator('.kqlab-rule-count-amount-range').innerText()))
      .toBeLessThan(amountShown);
    await wb.locator('.lm-TabBar-tab', { hasText: 'Figures' }).first().click();
    const undone = await inKernel();
    expect(undone).not.toEqual(edited);
    await expect.poll(drawn, { timeout: 60_000 }).toEqual(undone);

    // the README's picture: the workbench on the demo topics, figures tab
    await wb.evaluate((e) => e.scrollIntoView({ block: 'start' }));
    await page.evaluate(() => document.fonts && document.fonts.ready);
    // (the panel, the tabs and the reasons figure: down to the figure's bottom edge)
    const box = await wb.boundingBox();
    const fig = await reasons.boundingBox();
    await page.screenshot({
      path: testInfo.outputPath('readme-workbench.png'),
      clip: { x: box.x, y: box.y, width: Math.min(box.width, 1100),
              height: Math.min(fig.y + fig.height - box.y + 16, 720) },
    });
    await shot('02-notebook7-undone.png');
    expect(errors).toEqual([]);
  });
