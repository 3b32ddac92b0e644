// The core view outside Gradio: a page made by attention_inspector/notebook.py (inline in a notebook, or a file),
// drawn by the page's own scripts from one value, with no server. The core view is ui/static/core.js (as
// `coreView`, handed the `element`, `props` and `watch` Gradio hands it), its figures ui/static/figures.js and a
// step ui/static/step.js (as `stepTo`). This script only stands in for Gradio: it reads the value (gzip, base64, in
// #inspector-value), builds the step bar and the kind, layer and head menus, and gives the core view a new value
// when a menu changes, as the server's answer would: the figure of that view, one of those the value holds.
//
// The value: "core" (the core view's first value: translation, status, detachment, steps, candidates, attention),
// "view" (kind, layer, head, step, model: every layer x head), "menus" (per kind its layers and heads, [label, key]),
// "embedded" (per kind the layers whose figures the value holds), "figures" (a view's figure JSON by
// "kind/layer/head", or "kind/model") and "note" (what the value leaves out, said under the menus).
(async () => {
  const packed = document.getElementById("inspector-value").textContent.trim();
  const bytes = Uint8Array.from(atob(packed), (c) => c.charCodeAt(0));
  const unzipped = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const value = JSON.parse(await new Response(unzipped).text());
  const inspector = window.attentionInspector;
  inspector.gridsFit = true; // a grid of maps as wide as the cell, every head in sight (ui/static/figures.js)
  const root = document.getElementById("core");
  const $ = (id) => root.querySelector(`#${id}`);
  const view = { ...value.view, head: String(value.view.head) };
  const steps = value.core.steps.length;
  inspector.step = view.step;

  // The core view, given its values as Gradio gives them: `props.value` changes, then every watcher runs.
  let revision = value.core.revision;
  const props = { value: JSON.stringify(value.core) };
  const watchers = [];
  coreView(root, props, (name, work) => watchers.push(work));
  const answer = (parts) => {
    props.value = JSON.stringify({ revision: ++revision, ...parts });
    for (const work of watchers) work();
  };

  // The menus: a layer whose figures the value does not hold is listed, greyed out, with how to embed it.
  const entries = (select, list, chosen, held = null) => {
    select.replaceChildren(...list.map(([label, key]) => {
      const option = new Option(label, String(key), false, String(key) === String(chosen));
      if (held && !held.includes(key)) {
        option.disabled = true;
        option.title = "Not in this view: show(..., layers=[...]) embeds it";
      }
      return option;
    }));
  };
  const shownKey = () => (view.model ? `${view.kind}/model` : `${view.kind}/${view.layer}/${view.head}`);
  function menus() {
    const { layers, heads } = value.menus[view.kind];
    const held = value.embedded[view.kind];
    if (!held.includes(view.layer)) view.layer = held[held.length - 1];
    if (!heads.some(([, key]) => String(key) === view.head)) view.head = String(heads[0][1]);
    entries($("kind"), value.menus.kinds, view.kind);
    entries($("layer"), layers, view.layer, held);
    entries($("head"), heads, view.head);
    $("model-view").checked = view.model;
    $("layer").disabled = $("head").disabled = view.model;
  }
  const redraw = () => {
    menus();
    answer({ attention: value.figures[shownKey()] ?? null });
  };
  $("kind").addEventListener("change", (event) => { view.kind = event.target.value; redraw(); });
  $("layer").addEventListener("change", (event) => { view.layer = Number(event.target.value); redraw(); });
  $("head").addEventListener("change", (event) => { view.head = event.target.value; redraw(); });
  $("model-view").addEventListener("change", (event) => { view.model = event.target.checked; redraw(); });
  // The neuron view's Close (attention_inspector/notebook.py `neuron_view`), which the page sends to its server.
  root.addEventListener("click", (event) => {
    if (event.target instanceof Element && event.target.closest("#neuron .neuron-close")) answer({ neuron: null });
  });
  $("notebook-note").textContent = value.note || "";
  menus();

  // The step bar: the slider, its buttons, and ←/→ (Home, End) where the focus is not in a field, as on the page.
  const slider = $("step");
  Object.assign(slider, { max: Math.max(steps, 1), value: view.step, disabled: steps < 2 });
  const said = (t) => { $("step-number").textContent = `Step ${t} of ${steps}`; };
  const step = async (to) => {
    const corrected = await stepTo(to);
    slider.value = corrected ?? to;
    said(Number(slider.value));
  };
  said(view.step);
  slider.addEventListener("input", () => step(Number(slider.value)));
  const moves = { first: () => 1, previous: () => inspector.step - 1, next: () => inspector.step + 1,
                  last: () => steps };
  for (const [id, to] of Object.entries(moves)) $(id).addEventListener("click", () => step(to()));
  document.addEventListener("keydown", (event) => {
    const target = event.target instanceof Element ? event.target : document.body;
    if (target.closest("input, textarea, select") || event.altKey || event.ctrlKey || event.metaKey) return;
    const id = { ArrowRight: "next", ArrowLeft: "previous", Home: "first", End: "last" }[event.key];
    if (id) {
      event.preventDefault();
      $(id).click();
    }
  });

  // In a notebook the page is a frame of the notebook's page: as tall as what it draws.
  if (window.frameElement) {
    new ResizeObserver(() => {
      window.frameElement.style.height = `${document.documentElement.scrollHeight}px`;
    }).observe(document.body);
  }
  document.body.dataset.ready = "true"; // drawn (the tests wait for it)
})();
