() => {
  // ←/→ step when the page has the focus outside a text field (Gradio's button click, as a mouse would).
  document.addEventListener("keydown", (event) => {
    const target = event.target instanceof Element ? event.target : document.body;
    const typing = target.closest("input, textarea, select, [contenteditable]");
    if (typing || event.altKey || event.ctrlKey || event.metaKey) return;
    const button = {ArrowRight: "#next", ArrowLeft: "#previous", Home: "#first", End: "#last"}[event.key];
    if (button && document.querySelector(button)) { event.preventDefault(); document.querySelector(button).click(); }
  });

  // A click on a candidate's bar branches there, or, while the tab "Where each word came from" is open, asks why
  // the model chose its word and not that one (contrastive attribution, its chart brought into view once drawn); a
  // click on a head of the importance heatmap or of the patching grid opens it: the click fills the text field
  // beside the plot and presses its button, as a user would.
  const contrasting = () => document.querySelector("#sources-tab")?.checkVisibility() === true;
  const targets = {
    candidates: () => contrasting() ? ["#attribution-contrast", "#attribute", "#attribution"]
                                    : ["#branch-word", "#branch"],
    importance: () => ["#open-head", "#open-head-button"],
    "patching-grid": () => ["#open-head", "#open-head-button"],
  };
  let scrollTo = null; // the answer a click asked for, brought into view once drawn (ui/static/answers.js)
  let contrastPicked = null; // the contrast word a click put in its box, and the step and decoding it was picked at
  const shownAt = () => `${window.attentionInspector?.decoding}:${window.attentionInspector?.step}`;
  document.addEventListener("attention-inspector-answer", (event) => {
    if (!scrollTo || !event.target.matches(scrollTo)) return;
    scrollTo = null;
    event.target.scrollIntoView({block: "nearest"});
  });
  // A click on a cell of the heatmap opens the neuron view of its row (ui/neurons.py: of a single head; the status
  // line says so otherwise), and the panel's Close closes it: the cell goes to a hidden field and its button is
  // pressed, as for the charts above. The panel shows nothing until the cell's row is drawn (ui/static/core.js).
  const openNeuron = (cell) => {
    const input = document.querySelector("#neuron-cell textarea, #neuron-cell input");
    if (!input) return;
    if (cell !== "close") inspector.neuronTapped?.();
    input.value = cell;
    input.dispatchEvent(new Event("input", {bubbles: true}));
    setTimeout(() => document.querySelector("#neuron-open")?.click()); // once Gradio has taken the value in
  };
  document.addEventListener("click", (event) => {
    if (event.target instanceof Element && event.target.closest("#neuron .neuron-close")) openNeuron("close");
  });
  // Once a new decoding is drawn, the source words it left out are looked for (ui/omissions.py: a pass per span
  // of the source, longer than the translation), and the verdict, the source and the heatmap's keys marked.
  document.addEventListener("attention-inspector-decoding", () => {
    requestAnimationFrame(() => setTimeout(() => document.querySelector("#omissions-queued")?.click()));
  });
  // The click moves the step to the row clicked, and a heatmap that grows with the steps then has fewer rows, each
  // taller: another row comes under the pointer. Until the user does something else (moves the pointer, presses a
  // key or a button), the hover of a heatmap of one map names the cell clicked where it now is (the row the neuron
  // view shows), through every redraw and every report of the pointer where it rests (the browser's, after a scroll).
  let pinned = null; // { cell: [row, column], x, y: the pointer's place }
  const pin = (plot) => {
    const z = plot.data?.length === 1 ? plot.data[0].z : null;
    if (!pinned || !z) return;
    const [row, column] = pinned.cell;
    // The cell by its index on each axis (numbers, or categories in words): Plotly 4.1 draws no label for a point
    // named by its pointNumber.
    if (row < z.length && column < z[row].length) window.Plotly.Fx.hover(plot, { xval: column, yval: row });
  };
  document.addEventListener("mousemove", (event) => {
    if (pinned && (event.clientX !== pinned.x || event.clientY !== pinned.y)) pinned = null;
  }, true);
  for (const name of ["keydown", "pointerdown"]) document.addEventListener(name, () => { pinned = null; }, true);
  const bindHeatmap = () => {
    const plot = document.querySelector("#attention .js-plotly-plot");
    if (!plot || !plot.on || plot.dataset.clicks) return;
    plot.dataset.clicks = "bound";
    plot.on("plotly_click", (event) => {
      const point = event.points && event.points[0];
      const cell = point && point.data.type === "heatmap" ? point.pointNumber : null;
      if (!Array.isArray(cell)) return;
      pinned = { cell, x: event.event?.clientX, y: event.event?.clientY };
      openNeuron(`${cell[0]},${cell[1]}`);
    });
    plot.on("plotly_afterplot", () => pin(plot));
    plot.on("plotly_hover", (event) => {
      const hovered = event.points?.[0]?.pointNumber;
      if (pinned && String(hovered) !== String(pinned.cell)) pin(plot);
    });
  };
  const bind = () => {
    bindHeatmap();
    for (const [id, target] of Object.entries(targets)) {
      const plot = document.querySelector(`#${id} .js-plotly-plot`);
      if (!plot || !plot.on || plot.dataset.clicks) continue;
      plot.dataset.clicks = "bound";
      plot.on("plotly_click", (event) => {
        const [field, button, answer] = target();
        const value = event.points && event.points[0] && event.points[0].customdata;
        const input = document.querySelector(`${field} textarea, ${field} input`);
        if (typeof value !== "string" || !input) return;
        input.value = value;
        input.dispatchEvent(new Event("input", {bubbles: true}));
        if (field === "#attribution-contrast") contrastPicked = { value, at: shownAt() };
        setTimeout(() => {
          document.querySelector(button).click();
          scrollTo = answer;
        }, 50);
      });
    }
  };

  const inspector = (window.attentionInspector = window.attentionInspector || { step: 1 });
  // The step buttons (and ←/→, Home, End, which press them) step in the page: the core view and every plot redraw at
  // the new step in the click's own task (ui/static/step.js's event), then the slider is moved as a user moves it,
  // so that the server reads that step with the next request (a Gradio event of their own drew the step only once
  // the slider's change had come back). Each press counts from the step on screen, however quick. With nothing
  // translated, nothing happens.
  const moves = { first: () => 1, previous: (t) => t - 1, next: (t) => t + 1, last: () => inspector.steps };
  document.addEventListener("click", (event) => {
    const button = event.target instanceof Element && event.target.closest("#first, #previous, #next, #last");
    if (!button || !inspector.steps) return;
    const t = Math.min(Math.max(moves[button.id](inspector.step), 1), inspector.steps);
    if (t === inspector.step) return;
    inspector.step = t;
    document.dispatchEvent(new CustomEvent("attention-inspector-step"));
    const box = document.querySelector("#step input[type=number]");
    box.value = String(t);
    box.dispatchEvent(new Event("input", { bubbles: true }));
  });

  // The status line where the user looks: while the one at the top is out of sight (the user is down in a tab),
  // each new status shows again, as text, until clicked or for 10 s, in the page's flow right below the row the
  // user last pressed in (else above the tabs): it moves what follows down, and covers nothing. `always`: whether
  // or not (the server's "busy", ui/static/busy.js). "Stop computing" and the progress show above the heatmap while
  // something slow is computed. (`said` is called on every change of the status line.)
  const bar = Object.assign(document.createElement("div"), { id: "status-bar", hidden: true });
  bar.setAttribute("role", "status");
  bar.addEventListener("click", () => { bar.hidden = true; });
  let pressed = null; // the row (or block) the user last pressed in
  document.addEventListener("pointerdown", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    if (!target || target.closest("#status-bar, [role=listbox]")) return; // a menu's entries float over the page
    pressed = target.closest(".row") || target.closest(".block") || pressed;
  }, true);
  const placeBar = () => {
    const place = pressed?.isConnected && pressed.checkVisibility() ? pressed : document.querySelector("#what-if");
    if (!place) document.body.append(bar);
    else if (place.id === "what-if") { if (place.previousElementSibling !== bar) place.before(bar); }
    else if (place.nextElementSibling !== bar) place.after(bar);
  };
  let statusInView = true;
  let hideLater = null;
  let watched = false;
  const watchStatus = () => {
    const box = document.querySelector("#status");
    if (watched || !box) return;
    watched = true;
    new IntersectionObserver(([entry]) => {
      statusInView = entry.isIntersecting;
      if (statusInView) bar.hidden = true;
    }).observe(box);
  };
  // A contrast word picked from the candidates chart (why this word and not that one) is a candidate of that step
  // of that decoding: on another step or decoding, the box empties (kept, it would ask about a word the step may not
  // even consider). A word the user typed is theirs, and stays.
  const contrastCleared = () => {
    const field = document.querySelector("#attribution-contrast textarea, #attribution-contrast input");
    if (!contrastPicked || contrastPicked.at === shownAt()) return;
    if (field?.value === contrastPicked.value) {
      field.value = "";
      field.dispatchEvent(new Event("input", {bubbles: true}));
    }
    contrastPicked = null;
  };
  document.addEventListener("attention-inspector-step", contrastCleared);
  document.addEventListener("attention-inspector-decoding", contrastCleared);
  // The page's first answer (a link's translation, or the first example's) takes seconds with a large model: a
  // link's sentence shows in the box at once, and Stop shows once a second has passed with no answer
  // (ui/static/core.js keeps the revision drawn).
  const linked = new URLSearchParams(location.search).get("text");
  const box = document.querySelector("#source textarea");
  if (linked && box && !box.value) {
    box.value = linked;
    box.dispatchEvent(new Event("input", {bubbles: true}));
  }
  setTimeout(() => {
    if (!(inspector.revision > 0)) document.querySelector("#computing")?.classList.add("computing");
  }, 1000);
  inspector.said = (text, { always = false } = {}) => {
    text = String(text || "");
    document.querySelector("#computing")?.classList.toggle("computing", text.startsWith("Computing"));
    // A sentence Translate refused (too long, say: ui/operations.py `translate`): the line under the box says so.
    if (text.includes("The translation on screen is still that of")) {
      refused = document.querySelector("#source textarea")?.value.trim() ?? null;
      edited();
    }
    // A large model's translation is computed by a queued event of its own, with progress (ui/operations.py
    // TRANSLATING): Translate only said so.
    if (text.startsWith("Computing the translation with")) document.querySelector("#translate-queued")?.click();
    // And a what-if action (a branch, heads off, the beam, a comparison) of such a model (ui/operations.py LATER).
    if (text.startsWith("Computing with ")) document.querySelector("#later-queued")?.click();
    // And a large model's integrated gradients of one step (ui/tabs/sources.py ATTRIBUTING).
    if (text.startsWith("Computing attributions with")) document.querySelector("#attribute-queued")?.click();
    // Which explanation to trust: integrated gradients, once the first answer is drawn (the next frame painted,
    // ui/tabs/sources.py FOLLOW), so they are not computed while the page draws; a large model's whole comparison
    // at once (COMPARING).
    const integrated = () => document.querySelector("#faithfulness-queued")?.click();
    if (text.endsWith("Integrated gradients, the slowest method, follow.")) {
      requestAnimationFrame(() => setTimeout(integrated, 0));
    } else if (text.startsWith("Comparing the explanations with")) integrated();
    if (!text || (statusInView && !always)) { bar.hidden = true; return; }
    bar.textContent = text;
    placeBar();
    bar.hidden = false;
    clearTimeout(hideLater);
    hideLater = setTimeout(() => { bar.hidden = true; }, 10000);
  };
  // A sentence typed but not translated yet, or refused: the view and the tabs still show the one before, and say
  // so under the box (ui/static/core.js keeps the sentence translated).
  let refused = null;
  const untranslated = Object.assign(document.createElement("div"), { id: "untranslated", hidden: true });
  const edited = () => {
    const field = document.querySelector("#source textarea");
    if (!field) return;
    if (!untranslated.isConnected) { // under the row of the box and Translate (the box's own block clips)
      const source = document.querySelector("#source");
      (source.closest(".row") || source).after(untranslated);
    }
    const typed = field.value.trim();
    untranslated.hidden = inspector.sentence === undefined || !typed || typed === inspector.sentence.trim();
    untranslated.textContent = typed === refused
      ? "Not translated: the status line says why. The view and the tabs show the sentence translated before."
      : "Not translated yet: press Translate. The view and the tabs show the sentence translated before.";
  };
  document.addEventListener("input", (event) => { if (event.target.closest?.("#source")) edited(); });
  document.addEventListener("attention-inspector-sentence", () => requestAnimationFrame(edited));
  // A tab's progress (ui/plots.py `answers_view`: right above its answers) shows where the user looks: a button
  // pressed at the foot of a phone's screen started it below the screen, out of sight.
  const watchedProgress = new WeakSet();
  const watchProgress = () => {
    for (const box of document.querySelectorAll(".answers-progress")) {
      if (watchedProgress.has(box)) continue;
      watchedProgress.add(box);
      let running = false;
      new MutationObserver(() => {
        const now = !!box.querySelector(".wrap.minimal:not(.hide)");
        if (now && !running) {
          const { top, bottom } = box.getBoundingClientRect();
          if (top < 0 || bottom > window.innerHeight) box.scrollIntoView({ block: "nearest" });
        }
        running = now;
      }).observe(box, { attributes: true, attributeFilter: ["class"], childList: true, subtree: true });
    }
  };
  new MutationObserver(() => { bind(); watchStatus(); watchProgress(); }).observe(document.body,
                                                                                {childList: true, subtree: true});
}
