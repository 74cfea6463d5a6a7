// The quickstart notebook in a real JupyterLab in a real browser (issue 7, "Real-browser test"):
// run every cell, then use the workbench the way an analyst does — add a CEL rule through the
// PolicyEditor's form, watch its live count and the figures follow, open one rejected record —
// asserting on the page's DOM and cross-checking what the page shows against the kernel.
// The widgets' stable CSS classes are documented in kqlab.widgets.CSS.
import { test, expect } from '@playwright/test';

import { count, kernelEval, runAllCells } from './_jupyter.mjs';

const NOTEBOOK = '01_quickstart.ipynb';
const RULE = 'browser-cap';                       // the rule this test adds
const EXPR = 'value.amount <= 500.0';             // refuses the larger orders of the demo

test.beforeEach(async ({ request }) => {
  // the server keeps one kernel per notebook path: start from a fresh one
  for (const s of await (await request.get('/api/sessions')).json()) {
    await request.delete(`/api/sessions/${s.id}`);
  }
});

async function openNotebook(page, nb) {
  await page.goto(`/lab/tree/${nb}?reset`);
  await expect(page.locator('.jp-StatusBar-Widget', { hasText: /\| Idle/ }).first())
    .toBeVisible({ timeout: 90_000 });
}

test('quickstart: run all, add a rule in the editor, counts and figures follow, open a record',
  async ({ page }, testInfo) => {
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    const shot = (name) => page.screenshot({ path: testInfo.outputPath(name), fullPage: false });

    await openNotebook(page, NOTEBOOK);
    // the last cell prints the report path: every cell above it ran without an error (a cell
    // that raises fails the test at once, with its traceback)
    const failed = await runAllCells(page, 'static report:');
    await expect(failed).toHaveCount(0);

    const wb = page.locator('.kqlab-workbench').first();
    await wb.scrollIntoViewIfNeeded();
    await expect(wb).toBeVisible();
    const editor = wb.locator('.kqlab-policy-editor');
    await expect(editor.locator('.kqlab-rule-amount-range')).toBeVisible();
    // the edit the notebook made (min=50) is what the page shows, and it matches the kernel
    const amountShown = count(await editor.locator('.kqlab-rule-count-amount-range').innerText());
    const amountKernel = Number(await kernelEval(page,
      'print(wb.editor.counts["amount-range"]["failed"])'));
    expect(amountShown).toBe(amountKernel);
    expect(amountShown).toBeGreaterThan(0);
    await expect(editor.locator(`.kqlab-rule-${RULE}`)).toHaveCount(0);
    const outcomesBefore = await editor.locator('.kqlab-outcomes').innerText();
    // (the editor's own figures sit in the Policy tab: the workbench's are the last ones)
    const figures = wb.locator('.kqlab-figures').last();
    await expect(figures.locator('.js-plotly-plot')).toHaveCount(3);   // reasons, offsets, timeline
    await expect(figures).not.toContainText(RULE);
    await shot('01-workbench.png');

    // -- add a CEL rule through the form ---------------------------------------------------------
    await editor.locator('.kqlab-new-rule-kind select').selectOption('cel');
    await editor.locator('.kqlab-add-rule').click();
    const form = editor.locator('.kqlab-rule-form');
    await expect(form).toBeVisible();
    await form.locator('.kqlab-form-id input').fill(RULE);
    const expr = form.locator('.kqlab-form-param-expr textarea');
    await expr.fill('value.amount <= ');              // validated as you type: an error first
    await expect(form.locator('.kqlab-cel-status')).toContainText('⚠', { timeout: 30_000 });
    await expr.fill(EXPR);
    await expect(form.locator('.kqlab-cel-status')).toContainText('CEL compiles',
      { timeout: 30_000 });
    await shot('02-rule-form.png');
    await form.locator('.kqlab-form-apply').click();

    // the new rule's row with its live count; the form closes
    const row = editor.locator(`.kqlab-rule-${RULE}`);
    await expect(row).toBeVisible({ timeout: 60_000 });
    await expect(form).toBeHidden({ timeout: 60_000 });
    const shown = count(await editor.locator(`.kqlab-rule-count-${RULE}`).innerText());
    const kernel = JSON.parse(await kernelEval(page,
      `import json; print(json.dumps({"failed": wb.editor.counts["${RULE}"]["failed"],` +
      ` "policy": [r.id for r in wb.policy.rules],` +
      ` "fresh": kqlab.replay(orders, wb.policy, now=NOW).by_outcome()["rejected"],` +
      ` "now": wb.verdicts.by_outcome()["rejected"]}))`));
    expect(kernel.policy).toContain(RULE);
    expect(shown).toBe(kernel.failed);
    expect(shown).toBeGreaterThan(0);
    expect(kernel.now).toBe(kernel.fresh);             // the editor's verdicts = a full replay
    await expect(editor.locator('.kqlab-outcomes')).not.toHaveText(outcomesBefore);

    // the editor's impact figure names the rule that changed verdicts
    const impact = editor.locator('.kqlab-figures .js-plotly-plot').first();
    await expect(impact).toContainText(RULE, { timeout: 60_000 });
    await shot('03-rule-added.png');

    // the workbench's figures follow: the reasons figure now has a bar for the rule
    await wb.locator('.lm-TabBar-tab', { hasText: 'Figures' }).first().click();
    const reasons = figures.locator('.js-plotly-plot').first();
    await expect(reasons).toBeVisible({ timeout: 60_000 });
    await expect(reasons).toContainText(RULE, { timeout: 60_000 });
    await reasons.scrollIntoViewIfNeeded();
    // figures fill the notebook's width (they were a fixed 700 px) and draw no background
    // (a white box on the dark theme); one plotly.js for all of them, none per figure
    const plotBox = await reasons.boundingBox();
    expect(plotBox.width).toBeGreaterThan(800);
    const paper = await reasons.evaluate((d) => {
      const bg = d.querySelector('.main-svg rect.bg');
      return bg ? getComputedStyle(bg).fillOpacity : null;
    });
    expect(paper).toBe('0');
    expect(await kernelEval(page,
      'import plotly.graph_objects as go; from ipywidgets.widgets.widget import _instances; ' +
      'from kqlab.widgets._plot import PlotlyFigure; ws = list(_instances.values()); ' +
      'print(sum(isinstance(x, go.FigureWidget) for x in ws), ' +
      'sum(isinstance(x, PlotlyFigure) for x in ws) >= 3)')).toBe('0 True');
    await shot('04-figures.png');

    // -- one rejected record, down to its bytes --------------------------------------------------
    await wb.locator('.lm-TabBar-tab', { hasText: 'Rejections' }).first().click();
    const explorer = wb.locator('.kqlab-rejection-explorer');
    const table = explorer.locator('.kqlab-rejected-table');
    await explorer.locator('.kqlab-filter-reason select').selectOption(RULE);
    const rows = table.locator('tr.kqlab-rt-row');
    await expect(rows.first()).toBeVisible({ timeout: 60_000 });
    await expect(rows.first().locator('.kqlab-rt-reasons')).toContainText(RULE,
      { timeout: 60_000 });
    // sort by time, latest first, with the header: the kernel pages through the verdicts
    const timeHeader = table.locator('th.kqlab-rt-time button');
    await timeHeader.click();
    await expect(table.locator('th.kqlab-rt-time')).toHaveAttribute('aria-sort', 'ascending');
    await timeHeader.click();
    await expect(table.locator('th.kqlab-rt-time')).toHaveAttribute('aria-sort', 'descending',
      { timeout: 30_000 });
    const shownTimes = await rows.locator('.kqlab-rt-time').allInnerTexts();
    expect(shownTimes.length).toBeGreaterThan(1);
    expect([...shownTimes].sort().reverse()).toEqual(shownTimes);
    const latest = JSON.parse(await kernelEval(page,
      'import json; from kqlab.validate.view import RecordQuery; ' +
      `p = wb.verdicts.find(RecordQuery(reason="${RULE}", order="timestamp", descending=True), 0, 1); ` +
      'r = p.rows.to_pylist()[0]; print(json.dumps([r["partition"], r["offset"], wb.explorer.table.sort]))'));
    expect(latest[2]).toEqual({ key: 'timestamp', descending: true });
    const first = rows.first();
    expect(Number(await first.getAttribute('data-partition'))).toBe(latest[0]);
    expect(Number(await first.getAttribute('data-offset'))).toBe(latest[1]);
    const topic = await first.getAttribute('data-topic');
    const partition = await first.getAttribute('data-partition');
    const offset = await first.getAttribute('data-offset');
    await expect(first).toHaveClass(new RegExp(`kqlab-record-${partition}-${offset}`));
    await first.click();
    await expect(first).toHaveClass(/kqlab-rt-selected/, { timeout: 30_000 });
    const detail = explorer.locator('.kqlab-record-detail');
    await expect(detail).toContainText(RULE, { timeout: 60_000 });
    await expect(detail).toContainText(`${topic}-${partition}`);
    await expect(detail).toContainText(/[0-9a-f]{2} [0-9a-f]{2} [0-9a-f]{2}/);   // the raw bytes
    await expect(detail).not.toContainText('Traceback');
    await detail.scrollIntoViewIfNeeded();
    await shot('05-record-detail.png');

    // the kernel agrees that this record failed the rule
    const inKernel = await kernelEval(page,
      `d = wb.explorer.detail; print(d.partition == ${partition} and d.offset == ${offset} and ` +
      `"${RULE}" in [f["rule"] for f in d.failures])`);
    expect(inKernel).toBe("True");

    // a filter that leaves the selected record out clears the detail (it went stale before):
    // the record failed the rule itself, so it is no collateral
    await explorer.locator('.kqlab-filter-reason select').selectOption('(collateral)');
    await expect(detail).toContainText('Select a record', { timeout: 30_000 });
    await expect(table.locator('tr.kqlab-rt-selected')).toHaveCount(0);
    expect(await kernelEval(page, 'print(wb.explorer.detail is None)')).toBe('True');

    // JupyterLab's dark theme: the figures' text turns light, still no background
    await page.evaluate(() => window.jupyterapp.commands.execute('apputils:change-theme',
      { theme: 'JupyterLab Dark' }));
    await wb.locator('.lm-TabBar-tab', { hasText: 'Figures' }).first().click();
    await expect(reasons.locator('xpath=ancestor::*[contains(@class,"kqlab-plot")][1]'))
      .toHaveAttribute('data-theme', 'dark', { timeout: 30_000 });
    const title = await reasons.evaluate((d) => getComputedStyle(d.querySelector('.gtitle')).fill);
    const [r, g, b] = title.match(/\d+/g).map(Number);
    expect(0.2126 * r + 0.7152 * g + 0.0722 * b).toBeGreaterThan(150);   // light text
    expect(await reasons.evaluate((d) =>
      getComputedStyle(d.querySelector('.main-svg rect.bg')).fillOpacity)).toBe('0');
    await reasons.scrollIntoViewIfNeeded();
    await shot('05b-dark-theme.png');
    expect(errors).toEqual([]);
  });

// Notebook 02 (issue 16): the PolicyEditor of an AuthoringSession keeps following edits made
// in the page.  Was: after the first edit re-showed the figures, every later edit threw
// "gd.data must be an array" in the page (go.FigureWidget's removed views kept listening to
// their models) and the editor's figure stopped updating; and selecting a rule to edit could
// show another rule's kind (the form's dropdown had lost ipywidgets' value -> index sync).
test('authoring: the editor of notebook 02 follows edits made in the page',
  async ({ page }, testInfo) => {
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => {
      if (m.type() === 'error' && /gd\.data|must be an array|plotly/i.test(m.text())) {
        errors.push(`console: ${m.text()}`);
      }
    });
    const shot = (name) => page.screenshot({ path: testInfo.outputPath(name), fullPage: false });

    await openNotebook(page, '02_authoring_a_policy.ipynb');
    await runAllCells(page, 'vetted policy:');

    const editor = page.locator('.kqlab-policy-editor').first();
    await editor.scrollIntoViewIfNeeded();
    const plots = editor.locator('.kqlab-figures .js-plotly-plot');
    await expect(plots).toHaveCount(2, { timeout: 60_000 });    // reasons, impact
    const reasons = plots.first();
    await expect(reasons).toContainText('suggest.key_required', { timeout: 60_000 });
    const outcomes = editor.locator('.kqlab-outcomes');
    const before = await outcomes.innerText();
    await shot('06-authoring.png');

    // what the reasons figure draws, and what the kernel's current figure holds: per trace its
    // name, the sum of its bars and its labels (plotly's typed arrays read back as numbers)
    const drawn = async () => JSON.parse(await reasons.evaluate((gd) => JSON.stringify(
      gd._fullData.map((t) => [t.name, Array.from(t.x || []).reduce((a, b) => a + Number(b), 0),
                               Array.from(t.y || []).join('|')]))));
    const inKernel = async () => JSON.parse(await kernelEval(page,
      'import json; print(json.dumps([[t.name, float(sum(() if t.x is None else t.x)), ' +
      '"|".join(map(str, () if t.y is None else t.y))] ' +
      'for t in editor.figures["reasons"].data]))'));
    const follows = async () => {
      const want = await inKernel();
      await expect.poll(drawn, { timeout: 60_000 }).toEqual(want);
      return want;
    };
    const first = await follows();
    // the rule rows the page shows, in its order, are the session's rules: a removed rule's
    // row stays in the page, hidden (so a remove or its undo re-renders no other row)
    const shownRules = () => editor.evaluate((e) => [
      ...e.querySelectorAll('[class*="kqlab-rule-count-"]')].filter((c) => c.checkVisibility())
      .map((c) => [...c.classList].find((k) => k.startsWith('kqlab-rule-count-')).slice(17)));
    const sessionRules = async () => JSON.parse(await kernelEval(page,
      'import json; from kqlab.widgets._common import slug; ' +
      'print(json.dumps([slug(r.id) for r in session.policy.rules]))'));
    const rowsFollow = async () => {
      const want = await sessionRules();
      await expect.poll(shownRules, { timeout: 60_000 }).toEqual(want);
      return want;
    };
    const allRules = await rowsFollow();
    expect(allRules).toContain('suggest-key_required');

    // edits made in the page: the figures follow each one (the notebook already re-showed them)
    await editor.locator('.kqlab-rule-mode-amount-range button', { hasText: 'observe' }).click();
    await expect(outcomes).not.toHaveText(before, { timeout: 60_000 });
    expect(await kernelEval(page, 'print(session.policy.rule("amount-range").mode)'))
      .toBe('observe');
    const observed = await follows();
    expect(observed).not.toEqual(first);
    await expect(plots.nth(1)).toContainText('amount-range: mode reject -> observe',
      { timeout: 60_000 });                                           // the impact figure
    const removedRow = editor.locator('.kqlab-rule-suggest-key_required');
    await removedRow.evaluate((e) => { window.__kqRemovedRow = e; });
    await editor.locator('.kqlab-rule-remove-suggest-key_required').click();
    await expect(reasons).not.toContainText('suggest.key_required', { timeout: 60_000 });
    await follows();
    await expect(removedRow).toBeHidden({ timeout: 60_000 });
    expect(await rowsFollow()).toEqual(allRules.filter((r) => r !== 'suggest-key_required'));
    await editor.locator('.kqlab-undo').click();
    await expect(reasons).toContainText('suggest.key_required', { timeout: 60_000 });
    expect(await follows()).toEqual(observed);
    await expect(removedRow).toBeVisible({ timeout: 60_000 });
    expect(await rowsFollow()).toEqual(allRules);
    // back as the very element it was: shown again, not rendered again
    expect(await removedRow.evaluate((e) => e === window.__kqRemovedRow)).toBe(true);
    expect(count(await editor.locator('.kqlab-rule-count-suggest-key_required').innerText()))
      .toBe(Number(await kernelEval(page,
        'print(session.counts["suggest.key_required"]["failed"])')));
    await editor.locator('.kqlab-undo').click();
    await expect(outcomes).toHaveText(before, { timeout: 60_000 });
    expect(await follows()).toEqual(first);
    const shown = count(await editor.locator('.kqlab-rule-count-amount-range').innerText());
    expect(shown).toBe(Number(await kernelEval(page,
      'print(session.counts["amount-range"]["failed"])')));

    // the form shows the kind of the rule being edited, however often another was opened
    const kind = editor.locator('.kqlab-rule-form .kqlab-form-kind select');
    const shownKind = () => kind.evaluate((s) => s.options[s.selectedIndex].text);
    for (const [rule, want] of [['amount-range', 'field_range'], ['avro', 'avro_valid'],
                                ['amount-range', 'field_range']]) {
      await editor.locator(`.kqlab-rule-edit-${rule}`).click();
      await expect(editor.locator('.kqlab-rule-form .kqlab-form-id input'))
        .toHaveValue(rule, { timeout: 30_000 });
      await expect.poll(shownKind, { timeout: 30_000 }).toBe(want);
    }
    await editor.locator('.kqlab-rule-form').scrollIntoViewIfNeeded();
    await shot('07-form-kind.png');
    expect(errors).toEqual([]);
  });
