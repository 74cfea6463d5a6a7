// The MIME renderer extension: application/vnd.kqlab.verdicts+json in any notebook output,
// in a saved notebook opened with no kernel, in JupyterLab and Notebook 7.
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { MIME_TYPE, renderPayload } from './render';

export class VerdictsRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private _mimeType: string) {
    super();
    this.addClass('kqlab-verdicts-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    renderPayload(model.data[this._mimeType] as any, this.node);
    return Promise.resolve();
  }
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  defaultRank: 0,
  createRenderer: options => new VerdictsRenderer(options.mimeType)
};

const extension: IRenderMime.IExtension = {
  id: 'kqlab-lab:verdicts-renderer',
  description: "Renders kqlab's replay verdicts and fidelity reports",
  rendererFactory,
  rank: 0,
  dataType: 'json'
};

export default extension;
