// The policy's JSON Schema (kqlab/policy/policy.schema.json, served by the server extension at
// /kqlab/policy/schema) applied to the YAML under the cursor: which key path a line is at, the
// schema node there (a rule's own kind's parameters inside `rules:`), hover docs for keys and
// rule kinds, and the keys / rule kinds that may be written at a position (completion).
// A small line-based reading of block YAML (what kqlab's own dump writes); flow mappings
// ({a: 1}) are not walked into.

type Schema = { [key: string]: any };

const KEY = /^(\s*)(-\s+)?([A-Za-z0-9_.\-]+)\s*:(\s|$)/;

interface ILineKey {
  indent: number;       // column of the key
  dash: number | null;  // column of the list dash, when the key opens a list item
  key: string;
}

function lineKey(text: string): ILineKey | null {
  const m = KEY.exec(text);
  if (!m) {
    return null;
  }
  const dash = m[2] ? m[1].length : null;
  return { indent: m[1].length + (m[2] ? m[2].length : 0), dash, key: m[3] };
}

function lead(text: string): number {
  return text.length - text.trimStart().length;
}

function blank(text: string): boolean {
  const t = text.trim();
  return !t || t.startsWith('#');
}

/** The keys from the document root down to the mapping holding a key at column ``indent``
 * on line ``lineNo`` (1-based; ``isDash``: that key opens a list item); ``'[]'`` marks a
 * list item.  Also the mapping's keys (``siblings``) and, for a rule item, its ``kind``. */
export function parentPath(lines: string[], lineNo: number, indent: number, isDash: boolean
): { path: string[]; kind: string | null; siblings: string[] } {
  const siblings: string[] = [];
  let kind: string | null = null;
  const take = (t: string) => {
    const k = lineKey(t);
    if (k && k.indent === indent) {
      siblings.push(k.key);
      const v = k.key === 'kind' ? /:\s*([A-Za-z0-9_]+)/.exec(t.slice(k.indent)) : null;
      if (v) {
        kind = v[1];
      }
    }
  };
  // the mapping's own keys: below the line until something less indented, above it until
  // something less indented (the list item's dash line is the mapping's first key)
  for (let i = lineNo; i < lines.length; i++) {
    if (blank(lines[i])) {
      continue;
    }
    if (lead(lines[i]) < indent) {
      break;
    }
    take(lines[i]);
  }
  if (!isDash) {
    for (let i = lineNo - 2; i >= 0; i--) {
      if (blank(lines[i])) {
        continue;
      }
      if (lead(lines[i]) < indent) {
        const k = lineKey(lines[i]);
        if (k && k.dash !== null && k.indent === indent) {
          take(lines[i]);
        }
        break;
      }
      take(lines[i]);
    }
  }
  const path: string[] = [];
  let col = indent;
  let itemDash: number | null = isDash ? indent - 2 : null;
  for (let i = lineNo - 2; i >= 0; i--) {
    if (blank(lines[i])) {
      continue;
    }
    const k = lineKey(lines[i]);
    if (!k) {
      continue;
    }
    if (itemDash === null) {
      if (k.indent === col && k.dash !== null) {
        itemDash = k.dash;            // the sibling key that opened this list item
      } else if (k.indent < col) {
        path.unshift(k.key);
        col = k.indent;
        itemDash = k.dash;
      }
    } else if (k.indent <= itemDash && k.dash !== itemDash) {
      path.unshift(k.key, '[]');
      col = k.indent;
      itemDash = k.dash;
    }
  }
  return { path, kind: path.length === 2 && path[0] === 'rules' ? kind : null, siblings };
}

function deref(root: Schema, node: Schema | undefined): Schema | undefined {
  let n = node;
  for (let i = 0; n && n.$ref && i < 10; i++) {
    const name = String(n.$ref).replace('#/$defs/', '');
    const desc: string | undefined = n.description;
    n = { ...root.$defs[name], ...(desc ? { description: desc } : {}) };
  }
  return n;
}

/** The schema node of the mapping at ``path`` (a rule item: its kind's node when known). */
export function nodeAt(root: Schema, path: string[], kind: string | null): Schema | undefined {
  let node: Schema | undefined = root;
  for (let i = 0; node && i < path.length; i++) {
    const p = path[i];
    if (p === '[]') {
      node = deref(root, node.items);
      if (i === 1 && path[0] === 'rules' && kind && root.$defs[`rule.${kind}`]) {
        node = root.$defs[`rule.${kind}`];
      }
    } else {
      node = deref(root, node.properties?.[p] ??
        (typeof node.additionalProperties === 'object' ? node.additionalProperties : undefined));
    }
  }
  return node;
}

export function ruleKinds(root: Schema): { kind: string; doc: string }[] {
  return Object.keys(root.$defs)
    .filter(k => k.startsWith('rule.'))
    .map(k => ({ kind: k.slice(5), doc: root.$defs[k].description ?? '' }));
}

/** Hover text at (line, column) (1-based line, 0-based column), or null. */
export function hoverDoc(root: Schema, lines: string[], lineNo: number, column: number
): { from: number; to: number; title: string; doc: string } | null {
  const text = lines[lineNo - 1];
  const k = lineKey(text);
  if (!k) {
    return null;
  }
  const { path, kind } = parentPath(lines, lineNo, k.indent, k.dash !== null);
  const parent = nodeAt(root, path, kind);
  if (column >= k.indent && column <= k.indent + k.key.length) {
    const node = deref(root, parent?.properties?.[k.key]);
    if (!node?.description) {
      return null;
    }
    return { from: k.indent, to: k.indent + k.key.length, title: [...path, k.key].join('.')
      .replace(/\.\[\]/g, '[]'), doc: node.description };
  }
  if (k.key === 'kind' && path.length === 2 && path[0] === 'rules') {
    const v = /:\s*([A-Za-z0-9_]+)/.exec(text.slice(k.indent));
    const def = v ? root.$defs[`rule.${v[1]}`] : undefined;
    if (v && def) {
      const from = text.indexOf(v[1], k.indent + k.key.length);
      if (column >= from && column <= from + v[1].length) {
        return { from, to: from + v[1].length, title: `rule kind ${v[1]}`,
          doc: def.description };
      }
    }
  }
  return null;
}

/** What may be written where the cursor is: keys of the enclosing mapping not yet present,
 * or rule kinds after ``kind:`` in a rule. */
export function completions(root: Schema, lines: string[], lineNo: number, column: number
): { from: number; items: { label: string; doc: string }[] } | null {
  const text = lines[lineNo - 1].slice(0, column);
  const kindValue = /^(\s*)(-\s+)?kind:\s*([A-Za-z0-9_]*)$/.exec(text);
  if (kindValue) {
    const indent = kindValue[1].length + (kindValue[2] ? kindValue[2].length : 0);
    const { path } = parentPath(lines, lineNo, indent, !!kindValue[2]);
    if (path.length === 2 && path[0] === 'rules') {
      const typed = kindValue[3];
      return { from: column - typed.length, items: ruleKinds(root)
        .filter(r => r.kind.startsWith(typed)).map(r => ({ label: r.kind, doc: r.doc })) };
    }
    return null;
  }
  const partial = /^(\s*)(-\s+)?([A-Za-z0-9_.\-]*)$/.exec(text);
  if (!partial) {
    return null;
  }
  const indent = partial[1].length + (partial[2] ? partial[2].length : 0);
  const { path, kind, siblings } = parentPath(lines, lineNo, indent, !!partial[2]);
  const node = nodeAt(root, path, kind);
  if (!node?.properties) {
    return null;
  }
  const typed = partial[3];
  const present = new Set(siblings.filter(s => s !== typed));
  return { from: column - typed.length, items: Object.entries(node.properties as Schema)
    .filter(([key]) => key.startsWith(typed) && !present.has(key))
    .map(([key, sub]) => ({ label: key, doc: deref(root, sub)?.description ?? '' })) };
}
