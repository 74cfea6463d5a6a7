// Rendering of kqlab's result payloads (application/vnd.kqlab.verdicts+json) as plain DOM:
// a summary line, the outcome bar, the rules table and a small reasons chart (SVG), or a
// fidelity report's verdict table.  No widget state and no kernel: a saved notebook renders.
// Every number shown is read from the payload (the verdict core's), never recomputed here.

export const MIME_TYPE = 'application/vnd.kqlab.verdicts+json';
export const PAYLOAD_VERSION = 1;

type Row = { [key: string]: any };

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K, cls?: string, text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function fmt(value: any): string {
  if (value === null || value === undefined) {
    return '';
  }
  if (typeof value === 'boolean') {
    return value ? 'yes' : 'no';
  }
  if (typeof value === 'number') {
    return value.toLocaleString('en-US');
  }
  return String(value);
}

function table(head: string[], rows: any[][], cls: string): HTMLTableElement {
  const t = el('table', `kqlab-table ${cls}`);
  const tr = el('tr');
  head.forEach(h => tr.appendChild(el('th', undefined, h)));
  t.appendChild(el('thead')).appendChild(tr);
  const body = t.appendChild(el('tbody'));
  for (const row of rows) {
    const r = body.appendChild(el('tr'));
    row.forEach(c => {
      const td = r.appendChild(el('td', undefined, fmt(c)));
      if (typeof c === 'number') {
        td.className = 'kqlab-num';
      }
    });
  }
  return t;
}

const OUTCOME_COLOURS: { [k: string]: string } = {
  accepted: '#4c9a5a', rejected: '#c8453c', collateral: '#e39a3b', undetermined: '#8a8a8a'
};

function outcomeBar(outcomes: { [k: string]: number }): HTMLElement {
  const total = Object.values(outcomes).reduce((a, b) => a + b, 0);
  const bar = el('div', 'kqlab-outcome-bar');
  for (const [name, n] of Object.entries(outcomes)) {
    if (!n) {
      continue;
    }
    const seg = bar.appendChild(el('div', 'kqlab-outcome-seg'));
    seg.style.flexGrow = String(n);
    seg.style.background = OUTCOME_COLOURS[name] ?? '#999';
    seg.title = `${name}: ${fmt(n)} of ${fmt(total)}`;
  }
  return bar;
}

const SVG = 'http://www.w3.org/2000/svg';

function reasonsChart(reasons: Row[]): SVGSVGElement {
  const rowH = 18;
  const labelW = 170;
  const barW = 260;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'kqlab-reasons-chart');
  svg.setAttribute('width', String(labelW + barW + 70));
  svg.setAttribute('height', String(reasons.length * rowH + 4));
  const max = Math.max(1, ...reasons.map(r => r.culprit + r.collateral + r.not_enforced));
  const parts: [string, string][] = [
    ['culprit', '#c8453c'], ['collateral', '#e39a3b'], ['not_enforced', '#9db4d3']
  ];
  reasons.forEach((r, i) => {
    const y = i * rowH + 2;
    const g = document.createElementNS(SVG, 'g');
    g.setAttribute('class', 'kqlab-reason');
    const label = document.createElementNS(SVG, 'text');
    label.setAttribute('x', String(labelW - 6));
    label.setAttribute('y', String(y + rowH - 5));
    label.setAttribute('text-anchor', 'end');
    label.textContent = r.reason;
    g.appendChild(label);
    let x = labelW;
    for (const [key, colour] of parts) {
      const w = (r[key] / max) * barW;
      if (w > 0) {
        const rect = document.createElementNS(SVG, 'rect');
        rect.setAttribute('x', String(x));
        rect.setAttribute('y', String(y + 2));
        rect.setAttribute('width', String(Math.max(w, 1)));
        rect.setAttribute('height', String(rowH - 4));
        rect.setAttribute('fill', colour);
        const title = document.createElementNS(SVG, 'title');
        title.textContent = `${r.reason}: ${fmt(r[key])} ${key.replace('_', ' ')}`;
        rect.appendChild(title);
        g.appendChild(rect);
        x += w;
      }
    }
    const count = document.createElementNS(SVG, 'text');
    count.setAttribute('x', String(x + 4));
    count.setAttribute('y', String(y + rowH - 5));
    count.textContent = fmt(r.culprit + r.collateral + r.not_enforced);
    g.appendChild(count);
    svg.appendChild(g);
  });
  return svg;
}

function renderReplay(p: Row, host: HTMLElement): void {
  const s = p.summary;
  const head = host.appendChild(el('div', 'kqlab-summary'));
  head.appendChild(el('b', undefined, 'kqlab replay'));
  head.appendChild(document.createTextNode(' of policy '));
  head.appendChild(el('code', 'kqlab-policy-name', String(s.policy)));
  head.appendChild(document.createTextNode(
    ` (${s.profile}, ${s.framing} framing, ${p.engine} engine): ` +
    `${fmt(s.records)} records in ${fmt(s.batches)} batches`));
  const outcomes = host.appendChild(el('div', 'kqlab-outcomes'));
  for (const [name, n] of Object.entries(s.outcomes as { [k: string]: number })) {
    const item = outcomes.appendChild(el('span', 'kqlab-outcome'));
    item.dataset.outcome = name;
    item.appendChild(el('span', 'kqlab-swatch')).style.background =
      OUTCOME_COLOURS[name] ?? '#999';
    item.appendChild(document.createTextNode(`${name} ${fmt(n)}`));
  }
  outcomes.appendChild(el('span', 'kqlab-outcome',
    `lost ${fmt(s.records_lost ?? 0)}, delayed ${fmt(s.records_delayed ?? 0)}`));
  host.appendChild(outcomeBar(s.outcomes));
  host.appendChild(el('div', 'kqlab-heading', 'Rules'));
  host.appendChild(table(
    ['rule', 'kind', 'mode', 'failed', 'rejected records', 'rejected batches', 'eval errors'],
    (p.rules as Row[]).map(r => [r.rule, r.kind, r.mode, r.failed_records,
      r.rejected_records, r.rejected_batches, r.evaluation_errors]),
    'kqlab-rules'));
  host.appendChild(el('div', 'kqlab-heading',
    p.reasons_total > p.reasons.length
      ? `Reasons (top ${p.reasons.length} of ${p.reasons_total})` : 'Reasons'));
  host.appendChild(reasonsChart(p.reasons));
  if (p.issues_total) {
    host.appendChild(el('div', 'kqlab-heading', `Issues (${p.issues_total})`));
    const ul = host.appendChild(el('ul', 'kqlab-issues'));
    (p.issues as Row[]).forEach(i => ul.appendChild(el('li', undefined, i.message ?? i.kind)));
  }
  (p.notes as string[]).forEach(n => host.appendChild(el('div', 'kqlab-note', n)));
}

function renderFidelity(p: Row, host: HTMLElement): void {
  const head = host.appendChild(el('div', 'kqlab-summary'));
  head.appendChild(el('b', undefined, 'kqlab fidelity'));
  head.appendChild(document.createTextNode(' of policy '));
  head.appendChild(el('code', 'kqlab-policy-name', String(p.policy)));
  const targets: string[] = p.targets;
  const t = table(['rule', 'mode', ...targets], [], 'kqlab-fidelity');
  const body = t.querySelector('tbody')!;
  for (const r of p.rows as Row[]) {
    const tr = body.appendChild(el('tr'));
    tr.appendChild(el('td', undefined, r.rule));
    tr.appendChild(el('td', undefined, r.mode));
    for (const target of targets) {
      const c = r.targets[target];
      const td = tr.appendChild(el('td', 'kqlab-verdict', c ? c.verdict : ''));
      if (c) {
        td.dataset.verdict = c.verdict;
        td.title = c.why;
      }
    }
  }
  host.appendChild(t);
  for (const [target, why] of Object.entries(p.skipped as { [k: string]: string })) {
    host.appendChild(el('div', 'kqlab-note', `${target} skipped: ${why}`));
  }
}

/** Render ``payload`` into ``host`` (emptied first); a payload this renderer cannot read
 * says so instead of showing something wrong. */
export function renderPayload(payload: Row, host: HTMLElement): void {
  host.textContent = '';
  host.classList.add('kqlab-result');
  if (!payload || payload.version !== PAYLOAD_VERSION) {
    host.appendChild(el('div', 'kqlab-error',
      `kqlab-lab cannot read this output (payload version ${payload?.version}; ` +
      `it reads version ${PAYLOAD_VERSION}): update kqlab`));
    return;
  }
  if (payload.kind === 'replay') {
    renderReplay(payload, host);
  } else if (payload.kind === 'fidelity') {
    renderFidelity(payload, host);
  } else {
    host.appendChild(el('div', 'kqlab-error', `unknown kqlab output kind ${payload.kind}`));
  }
}
