// The kqlab-lab JupyterLab extension (issue 20) in a real JupyterLab in Debian chromium:
// a kqlab policy file with an error shows kqlab's own load message as a marker on the line it
// names (fixed in the editor, the marker goes); "Validate policy" from the command palette says
// the policy is valid; "Replay on the sample…" shows the verdicts; a saved, executed notebook
// opened with no kernel renders its application/vnd.kqlab.verdicts+json output.
// The expected message and counts come from kqlab itself (tests/browser/test_lab_extension.py
// passes them in KQLAB_E2E_EXPECT), never from the page.
import { test, expect } from '@playwright/test';

const EXPECT = JSON.parse(process.env.KQLAB_E2E_EXPECT || '{}');

test.beforeEach(async ({ request }) => {
  for (const s of await (await request.get('/api/sessions')).json()) {
    await request.delete(`/api/sessions/${s.id}`);
  }
});

async function palette(page, command) {
  await page.keyboard.press('Control+Shift+C');
  const input = page.locator('.lm-CommandPalette-input');
  await expect(input).toBeVisible();
  await input.fill(command);
  await page.locator('.lm-CommandPalette-item', { hasText: command }).first().click();
}

// first: a Notebook 7 page after JupyterLab's pages on one server throws (tests/browser/conftest.py)
test('Notebook 7: the saved notebook renders its verdicts', async ({ page }, testInfo) => {
  const errors = [];
  // Notebook 7's own core throws once on a server with no kernelspec (notebook_core.js, reading
  // 'schema'); what must not throw is this extension (its code is served from kqlab-lab/)
  page.on('pageerror', (e) => {
    if (String(e.stack).includes('kqlab-lab')) errors.push(`${e}\n${e.stack}`);
  });
  await page.goto(`/notebooks/${EXPECT.notebook}`);
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toBeVisible({ timeout: 60_000 });   // no kernel to start: none chosen
  await dialog.locator('.jp-Dialog-footer button').first().click();
  const out = page.locator('.jp-Notebook .kqlab-verdicts-output.kqlab-result');
  await expect(out).toBeVisible({ timeout: 30_000 });
  for (const [outcome, n] of Object.entries(EXPECT.notebook_outcomes)) {
    await expect(out.locator(`.kqlab-outcome[data-outcome="${outcome}"]`))
      .toHaveText(`${outcome} ${n.toLocaleString('en-US')}`);
  }
  await expect(out.locator('svg.kqlab-reasons-chart g.kqlab-reason')).toHaveCount(EXPECT.notebook_reasons);
  await page.screenshot({ path: testInfo.outputPath('00-notebook7.png') });
  expect(errors).toEqual([]);
});

test('policy file: kqlab marker and message, fixed live, Validate policy, Replay on the sample',
  async ({ page }, testInfo) => {
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`/lab/tree/${EXPECT.policy}?reset`);
    const editor = page.locator('.kqlab-policy-document .cm-content');
    await expect(editor).toBeVisible({ timeout: 60_000 });

    // the loader's message, under the line it names, with that line's text marked
    const message = page.locator('.kqlab-policy-document .kqlab-problem-message');
    await expect(message).toHaveText(EXPECT.message, { timeout: 30_000 });
    const line = page.locator('.kqlab-policy-document .cm-line.kqlab-problem-line');
    await expect(line).toHaveCount(1);
    await expect(line).toContainText(EXPECT.line_text);
    await expect(line.locator('.kqlab-problem-mark')).toHaveText(EXPECT.marked);
    await page.screenshot({ path: testInfo.outputPath('01-policy-marker.png') });

    // fix the typo with the schema's completion (Tab: the rule kinds that fit come first in
    // JupyterLab's completer, Enter takes one): the marker goes without a save
    await line.locator('.kqlab-problem-mark').click();
    await page.keyboard.press('End');
    await page.keyboard.press('Tab');
    const first = page.locator('.jp-Completer .jp-Completer-item').first();
    await expect(first).toContainText(EXPECT.fixed_text.split(': ')[1], { timeout: 30_000 });
    await page.screenshot({ path: testInfo.outputPath('01a-completion.png') });
    await page.keyboard.press('Enter');
    await expect(page.locator('.kqlab-policy-document .cm-line', { hasText: EXPECT.fixed_text }))
      .toHaveCount(1, { timeout: 30_000 });
    await expect(message).toHaveCount(0, { timeout: 30_000 });

    // hover docs from the schema: the rule kind under the pointer
    const at = await page.evaluate((word) => {
      const view = window.jupyterapp.shell.currentWidget.content.editor.editor;
      const pos = view.state.doc.toString().indexOf(word) + 3;
      const c = view.coordsAtPos(pos);
      return { x: c.left + 2, y: (c.top + c.bottom) / 2 };
    }, EXPECT.hover_word);
    await page.mouse.move(at.x, at.y);
    const hover = page.locator('.kqlab-hover');
    await expect(hover.locator('.kqlab-hover-title')).toHaveText(EXPECT.hover_title,
      { timeout: 30_000 });
    await expect(hover.locator('.kqlab-hover-doc')).toHaveText(EXPECT.hover_doc);
    await page.screenshot({ path: testInfo.outputPath('01b-hover.png') });

    await palette(page, 'Validate policy');
    await expect(page.locator('.Toastify__toast', { hasText: EXPECT.valid }))
      .toBeVisible({ timeout: 30_000 });

    await page.locator('.kqlab-policy-document .cm-content').click();
    await palette(page, 'Replay on the sample');
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toBeVisible();
    await dialog.locator('input').fill(EXPECT.sample);
    await dialog.getByRole('button', { name: /^(OK|Ok)$/ }).click();
    const result = page.locator('.jp-MainAreaWidget .kqlab-result');
    await expect(result).toBeVisible({ timeout: 60_000 });
    for (const [outcome, n] of Object.entries(EXPECT.replay_outcomes)) {
      await expect(result.locator(`.kqlab-outcome[data-outcome="${outcome}"]`))
        .toHaveText(`${outcome} ${n.toLocaleString('en-US')}`);
    }
    await expect(result.locator('table.kqlab-rules tbody tr')).toHaveCount(EXPECT.replay_rules);
    await page.screenshot({ path: testInfo.outputPath('02-replay.png') });
    expect(errors).toEqual([]);
  });

test('saved executed notebook, no kernel: the verdicts render', async ({ page, request }, testInfo) => {
  await page.goto(`/lab/tree/${EXPECT.notebook}?reset`);
  // the server offers no kernel: JupyterLab asks for one, the answer is none
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toBeVisible({ timeout: 60_000 });
  await dialog.locator('.jp-Dialog-footer button').first().click();
  await expect(page.locator('.jp-StatusBar-Widget', { hasText: 'No Kernel' }).first())
    .toBeVisible({ timeout: 30_000 });
  // kqlab-verdicts-output: the MIME renderer's widget (the HTML fallback has no such class)
  const out = page.locator('.jp-Notebook .kqlab-verdicts-output.kqlab-result');
  await expect(out).toBeVisible({ timeout: 30_000 });
  await expect(out.locator('.kqlab-policy-name')).toHaveText(EXPECT.notebook_policy);
  for (const [outcome, n] of Object.entries(EXPECT.notebook_outcomes)) {
    await expect(out.locator(`.kqlab-outcome[data-outcome="${outcome}"]`))
      .toHaveText(`${outcome} ${n.toLocaleString('en-US')}`);
  }
  await expect(out.locator('table.kqlab-rules tbody tr')).toHaveCount(EXPECT.notebook_rules.length);
  await expect(out.locator('table.kqlab-rules tbody tr td:first-child'))
    .toHaveText(EXPECT.notebook_rules);
  await expect(out.locator('svg.kqlab-reasons-chart g.kqlab-reason')).toHaveCount(EXPECT.notebook_reasons);
  // nothing ran: no kernel exists on the server
  expect(await (await request.get('/api/kernels')).json()).toEqual([]);
  await page.screenshot({ path: testInfo.outputPath('03-saved-notebook.png') });
});
