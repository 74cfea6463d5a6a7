// kqlab policy files as documents: a YAML file that starts a kqlab policy (``kqlab: 1``)
// opened in the file editor gets problem markers from kqlab's own loader (the server
// endpoint /kqlab/policy/validate: the same messages ``kqlab`` prints at load), re-checked
// as you type, hover docs and completion (Tab) of keys and rule kinds from the policy's JSON
// Schema, and the commands "Validate policy" and "Replay on the sample…".
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import {
  ICommandPalette, InputDialog, MainAreaWidget, Notification
} from '@jupyterlab/apputils';
import {
  CompletionHandler, ICompletionContext, ICompletionProvider, ICompletionProviderManager
} from '@jupyterlab/completer';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';
import { hoverTooltip } from '@codemirror/view';

import { IProblem, problemField, setProblem } from './problems';
import { renderPayload } from './render';
import { completions, hoverDoc } from './schema';

const POLICY_START = /^kqlab:\s*\d+\s*$/m;
const VALIDATE = 'kqlab:validate-policy';
const REPLAY = 'kqlab:replay-policy';

interface IPolicyEditor {
  path: string;
  text(): string;
  view(): any;
}

/** The kqlab policy editor of a document widget, or null (not a file editor, not a policy). */
function policyEditor(widget: any): IPolicyEditor | null {
  const editor = widget?.content?.editor;
  const context = widget?.context;
  if (!editor?.injectExtension || !context?.path) {
    return null;
  }
  const text = () => editor.model.sharedModel.getSource() as string;
  if (!/\.(ya?ml)$/i.test(context.path) || !POLICY_START.test(text())) {
    return null;
  }
  return { path: context.path, text, view: () => editor.editor };
}

async function post(path: string, body: any): Promise<any> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'kqlab', 'policy', path);
  const reply = await ServerConnection.makeRequest(
    url, { method: 'POST', body: JSON.stringify(body) }, settings);
  const data = await reply.json();
  if (!reply.ok) {
    throw new Error(data.message || reply.statusText);
  }
  return data;
}

let schemaPromise: Promise<any> | null = null;

/** The policy JSON Schema kqlab ships (fetched once from the server extension). */
function policySchema(): Promise<any> {
  if (!schemaPromise) {
    const settings = ServerConnection.makeSettings();
    const url = URLExt.join(settings.baseUrl, 'kqlab', 'policy', 'schema');
    schemaPromise = ServerConnection.makeRequest(url, {}, settings).then(r => r.json());
    schemaPromise.catch(() => (schemaPromise = null));
  }
  return schemaPromise;
}

/** Hover docs from the schema for the key (or rule kind) under the pointer. */
const schemaHover = hoverTooltip(async (view, pos) => {
  const schema = await policySchema();
  const line = view.state.doc.lineAt(pos);
  const lines = view.state.doc.toString().split('\n');
  const doc = hoverDoc(schema, lines, line.number, pos - line.from);
  if (!doc) {
    return null;
  }
  return {
    pos: line.from + doc.from, end: line.from + doc.to, above: true,
    create: () => {
      const dom = document.createElement('div');
      dom.className = 'kqlab-hover';
      const title = dom.appendChild(document.createElement('div'));
      title.className = 'kqlab-hover-title';
      title.textContent = doc.title;
      const body = dom.appendChild(document.createElement('div'));
      body.className = 'kqlab-hover-doc';
      body.textContent = doc.doc;
      return { dom };
    }
  };
});

/** Completion of policy keys and rule kinds from the schema (JupyterLab's completer: Tab). */
class PolicyCompletions implements ICompletionProvider {
  readonly identifier = 'kqlab-lab:policy-schema';
  readonly name = 'kqlab policy';
  readonly rank = 900;

  async isApplicable(context: ICompletionContext): Promise<boolean> {
    return policyEditor(context.widget) !== null;
  }

  async fetch(request: CompletionHandler.IRequest, context: ICompletionContext
  ): Promise<CompletionHandler.ICompletionItemsReply> {
    const schema = await policySchema();
    const before = request.text.slice(0, request.offset);
    const lineNo = before.split('\n').length;
    const column = before.length - before.lastIndexOf('\n') - 1;
    const found = completions(schema, request.text.split('\n'), lineNo, column);
    const lineStart = request.offset - column;
    if (!found) {
      return { start: request.offset, end: request.offset, items: [] };
    }
    return {
      start: lineStart + found.from, end: request.offset,
      items: found.items.map(i => ({ label: i.label, documentation: i.doc, type: 'kqlab' }))
    };
  }
}

/** Validate with kqlab's loader and mark the editor; the reply ({ok, error | policy, rules}). */
async function validate(ed: IPolicyEditor): Promise<any> {
  const reply = await post('validate', { path: ed.path, text: ed.text() });
  const problem: IProblem | null = reply.ok ? null : reply.error;
  ed.view().dispatch({ effects: setProblem.of(problem) });
  return reply;
}

const watched = new WeakSet<object>();
/** The sample last replayed (the dialog's default next time). */
let lastSample = '';

/** Check a policy document on open, on edits (debounced) and on save. */
function watch(widget: any): void {
  const ed = policyEditor(widget);
  if (!ed || watched.has(widget)) {
    return;
  }
  watched.add(widget);
  widget.content.editor.injectExtension([problemField, schemaHover]);
  widget.addClass('kqlab-policy-document');
  let timer = 0;
  const again = () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => void validate(ed).catch(console.warn), 600);
  };
  widget.content.editor.model.sharedModel.changed.connect(again);
  void validate(ed).catch(console.warn);
}

function currentPolicy(app: JupyterFrontEnd): IPolicyEditor | null {
  return policyEditor(app.shell.currentWidget);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'kqlab-lab:policy-documents',
  description: 'kqlab policy files as documents: problem markers, Validate, Replay',
  autoStart: true,
  optional: [ICommandPalette, ICompletionProviderManager],
  activate: (app: JupyterFrontEnd, palette: ICommandPalette | null,
    completer: ICompletionProviderManager | null) => {
    if (completer) {
      completer.registerProvider(new PolicyCompletions());
    }
    app.docRegistry.addWidgetExtension('Editor', {
      createNew: (widget: any, context: any) => {
        void context.ready.then(() => watch(widget));
        return undefined;
      }
    } as any);

    app.commands.addCommand(VALIDATE, {
      label: 'Validate policy',
      caption: "Load the policy with kqlab's loader and show what it reports",
      isEnabled: () => currentPolicy(app) !== null,
      execute: async () => {
        const ed = currentPolicy(app);
        if (!ed) {
          return;
        }
        watch(app.shell.currentWidget);
        const reply = await validate(ed);
        if (reply.ok) {
          Notification.success(
            `${ed.path}: policy ${reply.policy} is valid (${reply.rules} rules)`,
            { autoClose: 8000 });
        } else {
          Notification.error(reply.error.message, { autoClose: false });
        }
        return reply;
      }
    });

    app.commands.addCommand(REPLAY, {
      label: 'Replay on the sample…',
      caption: 'Replay a sample (segment file or log folder) through this policy',
      isEnabled: () => currentPolicy(app) !== null,
      execute: async () => {
        const ed = currentPolicy(app);
        if (!ed) {
          return;
        }
        const asked = await InputDialog.getText({
          title: 'Replay on the sample',
          label: 'Sample (segment file or log folder, relative to the server root)',
          placeholder: 'orders-0',
          text: lastSample
        });
        if (!asked.button.accept || !asked.value) {
          return;
        }
        let reply;
        try {
          reply = await post('replay', { path: ed.path, text: ed.text(), sample: asked.value });
        } catch (err) {
          Notification.error(`replay of ${asked.value}: ${(err as Error).message}`,
            { autoClose: false });
          return;
        }
        if (!reply.ok) {
          ed.view().dispatch({ effects: setProblem.of(reply.error) });
          Notification.error(reply.error.message, { autoClose: false });
          return;
        }
        lastSample = asked.value;
        const content = new Widget();
        renderPayload(reply.payload, content.node);
        const main = new MainAreaWidget({ content });
        main.id = `kqlab-replay-${Date.now()}`;
        main.title.label = `Replay: ${asked.value}`;
        main.title.closable = true;
        app.shell.add(main, 'main', { mode: 'split-right' });
        return reply.payload;
      }
    });

    if (palette) {
      palette.addItem({ command: VALIDATE, category: 'kqlab' });
      palette.addItem({ command: REPLAY, category: 'kqlab' });
    }
  }
};

export default plugin;
