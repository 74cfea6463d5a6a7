// Problem markers in a CodeMirror 6 editor: the line kqlab's loader named, the key or the
// character it pointed at, and the loader's own message below the line.
import { StateEffect, StateField, Range } from '@codemirror/state';
import { Decoration, DecorationSet, EditorView, WidgetType } from '@codemirror/view';

/** What kqlab's loader reported (a PolicyError's fields, from the server endpoint). */
export interface IProblem {
  message: string;
  line: number | null;
  column: number | null;
  key: string | null;
  reason: string;
  file: string;
}

export const setProblem = StateEffect.define<IProblem | null>();

class MessageWidget extends WidgetType {
  constructor(readonly message: string) {
    super();
  }
  eq(other: MessageWidget): boolean {
    return other.message === this.message;
  }
  toDOM(): HTMLElement {
    const node = document.createElement('div');
    node.className = 'kqlab-problem-message';
    node.textContent = this.message;
    return node;
  }
}

function decorations(view: { doc: any }, p: IProblem): DecorationSet {
  const doc = view.doc;
  const n = Math.min(Math.max(p.line ?? 1, 1), doc.lines);
  const line = doc.line(n);
  const out: Range<Decoration>[] = [
    Decoration.line({ class: 'kqlab-problem-line' }).range(line.from)
  ];
  let from = line.from + (line.text.length - line.text.trimStart().length);
  if (p.column !== null && p.column >= 1) {
    from = Math.min(line.from + p.column - 1, line.to);
  }
  const m = /^[^\s:]*/.exec(line.text.slice(from - line.from));
  const to = Math.min(from + Math.max(m ? m[0].length : 0, 1), line.to);
  if (to > from) {
    out.push(Decoration.mark({ class: 'kqlab-problem-mark', attributes: { title: p.message } })
      .range(from, to));
  }
  out.push(Decoration.widget({ widget: new MessageWidget(p.message), block: true, side: 1 })
    .range(line.to));
  return Decoration.set(out, true);
}

/** The editor extension: add it once, then dispatch ``setProblem`` effects. */
export const problemField = StateField.define<DecorationSet>({
  create: () => Decoration.none,
  update(deco, tr) {
    deco = deco.map(tr.changes);
    for (const e of tr.effects) {
      if (e.is(setProblem)) {
        deco = e.value ? decorations(tr.state, e.value) : Decoration.none;
      }
    }
    return deco;
  },
  provide: f => EditorView.decorations.from(f)
});
