// What the notebook specs share: running every cell of the open notebook, code in its kernel,
// and numbers read off the page.  (Not a spec: Playwright only collects *.spec.mjs.)
import { expect } from '@playwright/test';

// Run code in the open notebook's kernel and return what it printed (needs
// expose_app_in_browser).
export async function kernelEval(page, code) {
  return page.evaluate(async (code) => {
    const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    let text = '';
    const f = k.requestExecute({ code, silent: false, store_history: false });
    f.onIOPub = (m) => {
      if (m.header.msg_type === 'stream') text += m.content.text;
      if (m.header.msg_type === 'error') text += `ERROR ${m.content.ename}: ${m.content.evalue}`;
    };
    await f.done;
    return text.trim();
  }, code);
}

// Run All Cells from the Run menu and wait until a cell prints `doneText` (the notebook's
// last cell); a cell that raises fails the test at once, with its traceback.  Returns the
// locator of tracebacks.
export async function runAllCells(page, doneText) {
  await page.getByRole('menuitem', { name: 'Run', exact: true }).click();
  await page.getByRole('menuitem', { name: /^Run All Cells/ }).click();
  const done = page.locator('[data-mime-type="application/vnd.jupyter.stdout"]',
    { hasText: doneText });
  const failed = page.locator('[data-mime-type="application/vnd.jupyter.stderr"]',
    { hasText: 'Traceback (most recent call last)' });
  await expect(done.or(failed).first()).toBeVisible({ timeout: 240_000 });
  if (await failed.count()) {
    throw new Error(`a notebook cell failed:\n${(await failed.first().innerText()).slice(-3000)}`);
  }
  return failed;
}

// The first number in a text such as "1,234 records".
export function count(text) {
  const m = /([\d,]+)/.exec(text);
  if (!m) throw new Error(`no number in ${JSON.stringify(text)}`);
  return Number(m[1].replaceAll(',', ''));
}
