// kqlab's figure view (kqlab/widgets/_plot.py): plotly.js comes from one shared model, the
// figure is redrawn in place, colours follow the page's theme, the width follows the container.

const REF = /^IPY_MODEL_/;

// base64 of gzip -> text, with the browser's own decompressor
async function inflate(b64) {
  const raw = atob(b64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return await new Response(stream).text();
}

// plotly.js, evaluated once per page and version: the shared PlotlyJs model holds its source.
async function loadPlotly(model) {
  const ref = model.get("_plotly");
  const id = typeof ref === "string" ? ref.replace(REF, "") : null;
  if (!id) throw new Error("no plotly.js model");
  const bundle = await model.widget_manager.get_model(id);
  const version = bundle.get("version");
  const key = `__kqlabPlotly_${version}`;
  if (!globalThis[key]) {
    globalThis[key] = (async () => {
      // the bundle is UMD: given a `module`, it exports plotly.js there (strict-mode safe)
      const source = await inflate(bundle.get("source_gz"));
      const code = "const module = { exports: {} };\n" + source +
        "\nexport default module.exports;\n";
      const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
      try {
        return (await import(/* webpackIgnore: true */ url)).default;
      } finally {
        URL.revokeObjectURL(url);
      }
    })();
  }
  return globalThis[key];
}

// "light" or "dark": JupyterLab's and VS Code's own markers, else the background we sit on.
function pageTheme(el) {
  const body = document.body;
  const lab = body.getAttribute("data-jp-theme-light");
  if (lab === "true") return "light";
  if (lab === "false") return "dark";
  if (body.classList.contains("vscode-dark") || body.classList.contains("vscode-high-contrast")) {
    return "dark";
  }
  if (body.classList.contains("vscode-light")) return "light";
  for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
    const m = /rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\)/.exec(
      getComputedStyle(node).backgroundColor);
    if (m && (m[4] === undefined || Number(m[4]) > 0.5)) {
      const lum = 0.2126 * m[1] + 0.7152 * m[2] + 0.0722 * m[3];
      return lum < 128 ? "dark" : "light";
    }
  }
  return window.matchMedia && matchMedia("(prefers-color-scheme: dark)").matches
    ? "dark" : "light";
}

// The figure's layout with the theme's text and grid colours put into its template (the
// figure's own explicit colours still win), and no fixed width.
function themed(layout, colors) {
  const out = { ...(layout || {}) };
  const template = { ...(out.template || {}) };
  const tl = { ...(template.layout || {}) };
  tl.font = { ...(tl.font || {}), color: colors.text };
  for (const axis of ["xaxis", "yaxis"]) {
    tl[axis] = { ...(tl[axis] || {}), gridcolor: colors.grid, linecolor: colors.grid,
                 zerolinecolor: colors.zero };
  }
  tl.paper_bgcolor = "rgba(0,0,0,0)";
  tl.plot_bgcolor = "rgba(0,0,0,0)";
  template.layout = tl;
  out.template = template;
  delete out.width;
  out.autosize = true;
  if (out.uirevision === undefined) out.uirevision = "kqlab";  // keep the user's zoom
  return out;
}

export default {
  async render({ model, el }) {
    el.classList.add("kqlab-plot");
    const div = document.createElement("div");
    div.className = "kqlab-plot-area";
    el.appendChild(div);
    let Plotly;
    try {
      Plotly = await loadPlotly(model);
    } catch (err) {
      div.textContent = `plotly.js could not be loaded: ${err && err.message ? err.message : err}`;
      div.classList.add("kqlab-plot-error");
      return;
    }
    let theme = pageTheme(el);
    const draw = () => {
      const fig = model.get("figure") || {};
      const colors = (model.get("themes") || {})[theme] || {};
      el.dataset.theme = theme;
      return Plotly.react(div, fig.data || [], themed(fig.layout, colors),
                          { ...(model.get("config") || {}), responsive: true });
    };
    await draw();
    const onFigure = () => { draw(); };
    model.on("change:figure", onFigure);
    model.on("change:themes", onFigure);
    // follow the container: panels resize, tabs hidden when the figure was drawn open later
    let frame = 0;
    const resize = new ResizeObserver(() => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(() => {
        if (div.offsetWidth > 0 && div.isConnected) Plotly.Plots.resize(div);
      });
    });
    resize.observe(el);
    // follow the page's theme
    const watch = new MutationObserver(() => {
      const now = pageTheme(el);
      if (now !== theme) {
        theme = now;
        draw();
      }
    });
    watch.observe(document.body, { attributes: true,
                                    attributeFilter: ["data-jp-theme-light", "class"] });
    return () => {
      model.off("change:figure", onFigure);
      model.off("change:themes", onFigure);
      resize.disconnect();
      watch.disconnect();
      cancelAnimationFrame(frame);
      Plotly.purge(div);
    };
  },
};
