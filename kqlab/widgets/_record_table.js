// kqlab's record table (kqlab/widgets/_record_table.py): one page of rows drawn from the
// model; sorting, paging and selecting only set model traits — the kernel queries the
// verdicts (VerdictsView.find) and sends the next page.

function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) node.appendChild(c);
  return node;
}

export default {
  render({ model, el: root }) {
    root.classList.add("kqlab-rt");
    const set = (name, value) => { model.set(name, value); model.save_changes(); };

    const draw = () => {
      const columns = model.get("columns") || [];
      const rows = model.get("rows") || [];
      const sort = model.get("sort") || { key: "log", descending: false };
      const selected = model.get("selected") || "";
      const page = model.get("page") || 0;
      const pages = Math.max(1, model.get("pages") || 1);
      const focused = document.activeElement && root.contains(document.activeElement)
        ? document.activeElement.dataset.id : null;

      const head = el("tr", {}, columns.map((c) => {
        const active = c.sort && c.sort === sort.key;
        const label = c.label + (active ? (sort.descending ? " ▼" : " ▲") : "");
        const th = el("th", {
          class: `kqlab-rt-h kqlab-rt-${c.key}` + (c.numeric ? " kqlab-rt-num" : ""),
          "aria-sort": active ? (sort.descending ? "descending" : "ascending") : (c.sort ? "none" : null),
          scope: "col",
        });
        if (c.sort) {
          th.appendChild(el("button", {
            class: "kqlab-rt-sort", type: "button", text: label,
            title: `sort by ${c.label}` + (active ? " (click again to reverse)" : ""),
            onclick: () => set("sort", { key: c.sort,
                                         descending: active ? !sort.descending : false }),
          }));
        } else {
          th.textContent = c.label;
        }
        return th;
      }));

      const body = rows.map((r, i) => {
        const tr = el("tr", {
          class: `kqlab-rt-row ${r.cls || ""}` + (r.id === selected ? " kqlab-rt-selected" : ""),
          "data-id": r.id, "data-topic": r.topic, "data-partition": String(r.partition),
          "data-offset": String(r.offset), "data-outcome": r.outcome,
          "aria-selected": r.id === selected ? "true" : "false", tabindex: "0",
          onclick: () => set("selected", r.id),
          onkeydown: (e) => {
            const next = e.key === "ArrowDown" ? rows[i + 1] : e.key === "ArrowUp" ? rows[i - 1] : null;
            if (e.key === "Enter" || e.key === " ") { e.preventDefault(); set("selected", r.id); }
            else if (next) {
              e.preventDefault();
              set("selected", next.id);
            }
          },
        }, columns.map((c) => el("td", {
          class: `kqlab-rt-${c.key}` + (c.numeric ? " kqlab-rt-num" : ""),
          title: (r.titles || {})[c.key] || null,
          text: (r.cells || {})[c.key] ?? "",
        })));
        return tr;
      });
      const table = el("table", { class: "kqlab-rt-table", role: "grid" }, [
        el("thead", {}, [head]),
        el("tbody", {}, body.length ? body : [el("tr", { class: "kqlab-rt-empty" }, [
          el("td", { colspan: String(columns.length || 1), text: model.get("empty") || "" })])]),
      ]);
      const pager = el("div", { class: "kqlab-rt-pager" }, [
        el("button", { class: "kqlab-rt-prev", type: "button", text: "‹ previous",
                       disabled: page <= 0, onclick: () => set("page", page - 1) }),
        el("span", { class: "kqlab-rt-status", text: model.get("status") || "" }),
        el("button", { class: "kqlab-rt-next", type: "button", text: "next ›",
                       disabled: page + 1 >= pages, onclick: () => set("page", page + 1) }),
      ]);
      root.replaceChildren(el("div", { class: "kqlab-rt-scroll" }, [table]), pager);
      // keep the keyboard where it was (arrow keys move the selection row by row)
      const again = focused && root.querySelector(`tr[data-id="${CSS.escape(focused)}"]`);
      const chosen = root.querySelector(`tr[data-id="${CSS.escape(selected)}"]`);
      if (again) (chosen || again).focus({ preventScroll: false });
    };

    draw();
    // one message from the kernel changes several traits (a new page: rows, status, pages...):
    // draw once for all of them, in the same task (no frame's delay)
    let pending = false;
    const redraw = () => {
      if (pending) return;
      pending = true;
      queueMicrotask(() => { pending = false; draw(); });
    };
    const names = ["columns", "rows", "sort", "selected", "page", "pages", "status", "empty"];
    for (const n of names) model.on(`change:${n}`, redraw);
    return () => { for (const n of names) model.off(`change:${n}`, redraw); };
  },
};
