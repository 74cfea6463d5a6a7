// The page side of benchmarks/browser_edit.py: open the benchmark notebook in JupyterLab
// (Debian chromium, playwright-core from e2e/), run it, then make rule edits with the mouse
// and time each one in the page, from the input event to the last count, table and figure
// change.  Writes one JSON document to $RESULT.
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.env.E2E_DIR, 'package.json'));
const { chromium } = require('playwright-core');

const URL = process.env.LAB_URL;
const EDITS = Number(process.env.EDITS || 10);
const QUIET_MS = 400;          // no change for this long (kernel idle): the edit is done

const KINDS = ['mode-observe', 'mode-reject', 'form-apply', 'remove', 'undo'];

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const errors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  page.on('pageerror', (e) => errors.push(String(e)));
  const t0 = Date.now();
  await page.goto(`${URL}/lab/tree/${process.env.NOTEBOOK}?reset`);
  await page.locator('.jp-StatusBar-Widget', { hasText: /\| Idle/ }).first()
    .waitFor({ timeout: 120_000 });
  await page.evaluate(() => window.jupyterapp.commands.execute('notebook:run-all-cells'));
  const ready = page.locator('[data-mime-type="application/vnd.jupyter.stdout"]',
    { hasText: 'bench ready:' });
  const failed = page.locator('[data-mime-type="application/vnd.jupyter.stderr"]',
    { hasText: 'Traceback' });
  await ready.or(failed).first().waitFor({ timeout: 1_200_000 });
  if (await failed.count()) throw new Error(`the notebook failed:\n${await failed.first().innerText()}`);
  await page.locator('.kqlab-policy-editor .kqlab-rule-count-currency').waitFor({ timeout: 120_000 });
  const readyS = (Date.now() - t0) / 1000;

  const kernelEval = (code) => page.evaluate(async (code) => {
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

  // -- instrumentation: input event time, DOM changes by kind, figure redraws -----------------
  await page.evaluate(() => {
    const kq = window.__kq = { t0: null, armed: false, events: [] };
    // only what is visible counts (a view in a hidden tab costs page time, is not waited for)
    const shown = (el) => el.isConnected && el.checkVisibility();
    const hook = (gd) => {
      if (gd.__kqHooked || typeof gd.on !== 'function') return;
      gd.__kqHooked = true;
      // a new figure view (drawn for the first time): its appearance is a change too
      kq.events.push({ k: shown(gd) ? 'plot' : 'hidden', t: performance.now() });
      gd.on('plotly_afterplot', () => kq.events.push(
        { k: shown(gd) ? 'plot' : 'hidden', t: performance.now() }));
    };
    // how long plotly.js itself takes per redraw (the figure view calls Plotly.react; its
    // bundle is loaded with the first figure view)
    kq.reacts = [];
    const wrapped = new Set();
    const wrapPlotly = () => {
      for (const key of Object.keys(globalThis).filter((k) => k.startsWith('__kqlabPlotly_'))) {
        if (wrapped.has(key)) continue;
        wrapped.add(key);
        globalThis[key].then((Plotly) => {
          const react = Plotly.react;
          Plotly.react = async (...args) => {
            const t = performance.now();
            try { return await react.apply(Plotly, args); } finally {
              kq.reacts.push({ t0: t, t: performance.now() });
            }
          };
        });
      }
    };
    kq.hookAll = () => {
      wrapPlotly();
      document.querySelectorAll('.js-plotly-plot').forEach(hook);
    };
    kq.hookAll();
    document.addEventListener('pointerdown', (e) => {
      if (kq.armed) { kq.t0 = e.timeStamp; kq.armed = false; }
    }, true);
    const kind = (node) => {
      const el = node.nodeType === 1 ? node : node.parentElement;
      if (!el) return 'other';
      if (el.closest('.js-plotly-plot')) return 'inplot';
      if (!el.closest('.kqlab-workbench, .kqlab-policy-editor, .kqlab-replay-panel, ' +
                      '.kqlab-rejection-explorer, .kqlab-figures, .kqlab-rt')) {
        return 'other';                               // not a kqlab view (plotly's text tester...)
      }
      if (!shown(el)) return 'hidden';
      if (el.closest('.kqlab-rt')) return 'table';
      if (el.closest('.kqlab-policy-editor') || el.closest('.kqlab-replay-panel')) return 'counts';
      return 'other';
    };
    // rule rows the page renders: a row's count element not seen before (one per row view
    // created; a view gets its classes once it is in the page, so new ones are looked for on
    // every change)
    kq.rows = [];
    const COUNT = '.kqlab-policy-editor [class*="kqlab-rule-count-"]';
    const seen = new WeakSet(document.querySelectorAll(COUNT));
    new MutationObserver((records) => {
      const t = performance.now();
      kq.hookAll();                                   // new figure views, as they appear
      const made = [...document.querySelectorAll(COUNT)].filter((el) => !seen.has(el));
      made.forEach((el) => seen.add(el));
      if (made.length) kq.rows.push({ t, n: made.length });
      for (const r of records) {
        const k = kind(r.target);
        if (k === 'inplot') continue;                 // plotly's own work: its afterplot says
        const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
        kq.events.push({ k, t, d: el ? `${r.type}:${String(el.className).slice(0, 80)}` : '' });
      }
    }).observe(document.querySelector('.jp-Notebook'),
      { subtree: true, childList: true, characterData: true, attributes: true,
        attributeFilter: ['class', 'disabled'] });
  });

  // until the kernel is idle and nothing changed for `quiet` ms (needs some change since t0
  // when `edit` is set)
  const settle = (edit, quiet = QUIET_MS) => page.evaluate(async ({ edit, quiet }) => {
    const kq = window.__kq;
    const kernel = () => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const start = performance.now();
    return await new Promise((resolve, reject) => {
      const tick = () => {
        const now = performance.now();
        const evs = kq.events.filter((e) => e.k !== 'other' && e.k !== 'hidden');
        const last = evs.length ? Math.max(...evs.map((e) => e.t)) : start;
        const seen = !edit || (kq.t0 !== null && evs.some((e) => e.k === 'counts') &&
                               evs.some((e) => e.k === 'plot'));
        if (seen && kernel().status === 'idle' && now - Math.max(last, start) >= quiet) {
          resolve(true);
        } else if (now - start > 300_000) {
          reject(new Error(`no settled page: ${JSON.stringify(evs.slice(-5))}`));
        } else {
          setTimeout(tick, 10);
        }
      };
      tick();
    });
  }, { edit, quiet });

  const editor = page.locator('.kqlab-policy-editor').first();
  const prepare = async (kind, i) => {       // untimed: what comes before the input
    if (kind === 'form-apply') {
      await editor.locator('.kqlab-rule-edit-amount').click();
      await editor.locator('.kqlab-rule-form .kqlab-form-id input').waitFor();
      await page.waitForFunction(() => document.querySelector(
        '.kqlab-rule-form .kqlab-form-id input').value === 'amount');
      await editor.locator('.kqlab-rule-form .kqlab-form-param-max input').fill(String(480 - i));
    }
    await settle(false);
  };
  const target = (kind) => ({
    'mode-observe': editor.locator('.kqlab-rule-mode-currency button', { hasText: /^observe$/ }),
    'mode-reject': editor.locator('.kqlab-rule-mode-currency button', { hasText: /^reject$/ }),
    'form-apply': editor.locator('.kqlab-rule-form .kqlab-form-apply'),
    remove: editor.locator('.kqlab-rule-remove-valid-order'),
    undo: editor.locator('.kqlab-undo'),
  })[kind];

  // what the page draws and shows vs what the kernel holds (untimed, after each edit)
  const verify = async () => {
    const want = JSON.parse(await kernelEval('print(_state())'));
    for (let attempt = 0; ; attempt++) {
      const got = await page.evaluate(() => {
        const fp = (gd) => gd._fullData.map((t) => {
          const x = Array.from(t.x || []);
          let s = 0;
          for (const v of x) { const f = Number(v); if (!Number.isNaN(f)) s += f; }
          return [t.name, x.length, s, Array.from(t.y || []).length];
        });
        const figures = [...document.querySelectorAll('.kqlab-figures')]
          .filter((c) => c.checkVisibility())
          .map((c) => [...c.querySelectorAll('.js-plotly-plot')].map(fp));
        // the rows shown, in the page's order (a removed rule's row stays in the page, hidden)
        const shown = [...document.querySelectorAll(
          '.kqlab-policy-editor [class*="kqlab-rule-count-"]')].filter((el) => el.checkVisibility());
        const counts = {};
        shown.forEach((el) => {
          const id = [...el.classList].find((c) => c.startsWith('kqlab-rule-count-')).slice(17);
          counts[id] = Number(/([\d,]+)/.exec(el.innerText)[1].replaceAll(',', ''));
        });
        return { figures, counts, rows: shown.length };
      });
      const same = (a, b) => JSON.stringify(a, (k, v) => (typeof v === 'number' ? Number(v.toPrecision(9)) : v)) ===
        JSON.stringify(b, (k, v) => (typeof v === 'number' ? Number(v.toPrecision(9)) : v));
      if (same(got, want)) return attempt;
      if (attempt > 100) throw new Error(`the page does not show the kernel's state:\n` +
        `page   ${JSON.stringify(got).slice(0, 1500)}\nkernel ${JSON.stringify(want).slice(0, 1500)}`);
      await page.waitForTimeout(100);
    }
  };

  // warm-up: one cycle, untimed (first impact figure, rule rows built, caches warm)
  for (let i = 0; i < KINDS.length; i++) {
    await prepare(KINDS[i], i);
    await page.evaluate(() => { window.__kq.events = []; window.__kq.t0 = null; window.__kq.armed = true; });
    await target(KINDS[i]).click();
    await settle(true);
    await verify();
  }
  await kernelEval('TIMES.clear()');

  const edits = [];
  for (let i = 0; i < EDITS; i++) {
    const kind = KINDS[i % KINDS.length];
    await prepare(kind, KINDS.length + i);
    await page.evaluate(() => {
      window.__kq.hookAll(); window.__kq.events = []; window.__kq.reacts = [];
      window.__kq.rows = []; window.__kq.t0 = null; window.__kq.armed = true;
    });
    await target(kind).click();
    await settle(true);
    const late = await verify();
    const m = await page.evaluate(() => {
      const kq = window.__kq;
      const evs = kq.events.filter((e) => e.k !== 'other' && e.k !== 'hidden' && e.t >= kq.t0);
      const last = (k) => {
        const ts = evs.filter((e) => !k || e.k === k).map((e) => e.t);
        return ts.length ? Math.max(...ts) - kq.t0 : null;
      };
      return {
        page_ms: last(null), first_ms: Math.min(...evs.map((e) => e.t)) - kq.t0,
        counts_ms: last('counts'), table_ms: last('table'), figures_ms: last('plot'),
        redraws: evs.filter((e) => e.k === 'plot').length,
        rows_rendered: kq.rows.filter((r) => r.t >= kq.t0).reduce((a, r) => a + r.n, 0),
        react_ms: kq.reacts.filter((r) => r.t0 >= kq.t0).reduce((a, r) => a + r.t - r.t0, 0),
        react_start_ms: (() => {
          const ts = kq.reacts.filter((r) => r.t0 >= kq.t0).map((r) => r.t0);
          return ts.length ? Math.min(...ts) - kq.t0 : null;
        })(),
        trail: evs.slice(-6).map((e) => [e.k, Math.round(e.t - kq.t0), e.d || '']),
        hidden_ms: (() => {
          const ts = kq.events.filter((e) => e.k === 'hidden' && e.t >= kq.t0).map((e) => e.t);
          return ts.length ? Math.max(...ts) - kq.t0 : null;
        })(),
      };
    });
    edits.push({ kind, ...m, verify_polls: late });
  }
  const kernelTimes = JSON.parse(await kernelEval('import json; print(json.dumps(TIMES))'));
  const kernelMs = JSON.parse(await kernelEval(
    `import json; print(json.dumps(kernel_edits(${EDITS})))`));
  await page.screenshot({ path: path.join(process.env.SHOTS, 'browser_edit.png') });
  if (errors.length) throw new Error(`errors in the page: ${errors.join('\n')}`);
  writeFileSync(process.env.RESULT, JSON.stringify({
    ready_s: readyS, edits, kernel_times: kernelTimes, kernel_ms: kernelMs,
  }));
} finally {
  await browser.close();
}
