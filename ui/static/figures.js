// Figures the page draws itself (ui/plots.py), shared by every plot (plot.js) and the core view (core.js): loaded
// once in the page's <head>, after plotly.js. A figure's JSON is as viz/ builds it; one built for stepping (its
// `layout.meta` holds every step's titles or bars) is drawn at the page's step (window.attentionInspector.step),
// and redrawn on every "attention-inspector-step" event.
//
// `layout.meta` says how a stepped figure shows step t. A heatmap (viz/views.py `_steppable`) is built at the last
// step: "grows" is "rows" (cross-attention: one query row per step), "square" (decoder self-attention: rows and
// key columns) or null (encoder self-attention: only the title changes), and "titles" holds every step's title.
// Showing step t keeps the first t + 1 rows (and columns), moves the step's outline to row t and shows step t's
// title: exactly the figure viz/views.py builds for step t (a browser test compares the two). A view in words has
// "frames" instead: every step's cells, categories, axis labels and outlines, each list as it is or as what differs
// from the last step's (viz/views.py `_frame`: the row of the word being written), put in place. A bar chart's
// "bars" (viz/views.py `translation_frames`) hold what differs at every step.
(() => {
  const inspector = (window.attentionInspector = window.attentionInspector || { step: 1 });

  // A frame's field as it is, or a list as what differs from the last step's (viz/views.py `_changes`): {fromLast:
  // {n, width, changed}}, the last step's first n entries (each cut to width), those that differ put in.
  function fromLast(last, sent) {
    const changes = sent?.fromLast;
    if (!changes) return sent;
    const { n, width, changed } = changes;
    const shown = last.slice(0, n).map((entry) => (width === undefined ? entry : entry.slice(0, width)));
    for (const [i, entry] of changed) shown[i] = entry;
    return shown;
  }

  function figureAtStep(figure, t) {
    const frame = figure.layout.meta.frames && figure.layout.meta.frames[t];
    if (frame) {
      frame.data.forEach((fields, i) => {
        for (const [key, sent] of Object.entries(fields)) figure.data[i][key] = fromLast(figure.data[i][key], sent);
      });
      for (const [name, fields] of Object.entries(frame.axes)) {
        const axis = figure.layout[name];
        for (const [key, sent] of Object.entries(fields)) axis[key] = fromLast(axis[key], sent);
      }
      figure.layout.shapes = frame.shapes;
    }
    const grows = figure.layout.meta.grows;
    const keep = (values) => (values === undefined ? values : values.slice(0, t + 1));
    if (grows) {
      for (const trace of figure.data) {
        trace.z = trace.z.slice(0, t + 1);
        trace.y = keep(trace.y);
        trace.customdata = keep(trace.customdata); // the attention weights behind a measure, if any
        if (grows === "square") {
          trace.z = trace.z.map((row) => row.slice(0, t + 1));
          if (trace.customdata) trace.customdata = trace.customdata.map((row) => row.slice(0, t + 1));
          trace.x = keep(trace.x);
        }
      }
      // A grid's panels label as many of the keys shown as fit them (viz/attention.py `head_grid`): its first keys,
      // at an early step of decoder self-attention, more densely than the last step's labels.
      const { keyLabels, keyFit } = figure.layout.meta;
      const every = keyLabels ? Math.max(1, Math.ceil((t + 1) / keyFit)) : 1;
      const keyText = keyLabels && keyLabels.slice(0, t + 1).map((label, i) => (i % every === 0 ? label : ""));
      for (const [name, axis] of Object.entries(figure.layout)) {
        if (name.startsWith("yaxis") || (grows === "square" && name.startsWith("xaxis"))) {
          axis.categoryarray = keep(axis.categoryarray);
          axis.tickvals = keep(axis.tickvals);
          axis.ticktext = keyText && name.startsWith("xaxis") ? keyText : keep(axis.ticktext);
        }
      }
      for (const shape of figure.layout.shapes || []) {
        shape.y0 = t - 0.5;
        shape.y1 = t + 0.5;
        if (grows === "square") shape.x1 = t + 0.5;
      }
    }
    figure.layout.title.text = figure.layout.meta.titles[t];
    return figure;
  }

  // A bar chart's step: what differs from the figure's own bars (every field for a step's candidates, only
  // the highlight colours for the translation's probabilities).
  function barsAtStep(figure, t) {
    const bars = figure.layout.meta.bars[t];
    const [trace] = figure.data;
    if (bars.x) {
      Object.assign(trace, { x: bars.x, y: bars.y, text: bars.text, customdata: bars.customdata });
      Object.assign(figure.layout.xaxis, { categoryarray: bars.x, tickvals: bars.x, ticktext: bars.ticktext });
      figure.layout.title.text = bars.title;
    }
    trace.marker.color = bars.colors;
    return figure;
  }

  // A heatmap's width per key (an upright label of 10 px) and beside its keys (the row labels and the colour bar); a
  // bar chart's beside its bars (the y axis and its title).
  const KEY_PX = 12;
  const HEATMAP_SIDES = 190;
  const BAR_SIDES = 80;
  const GRID_PX = 720; // viz/attention.py GRID_PX: its panels label as many keys as fit them
  const GRID_SIDES = 190; // viz/attention.py GRID_SIDES: a grid's row labels and colour bar
  const PHONE = window.matchMedia("(max-width: 720px)"); // style.css's one column
  const COLORBAR_ABOVE = 44; // a colour bar laid across, with its title above it
  const ROW_LABEL_SIDE = 110; // a heatmap's row labels and its axis title, without the colour bar beside them

  // Every plot's toolbar downloads PNG and SVG, named after the view and the step (layout.meta.file); it has no
  // box and lasso selection, which nothing on the page uses (a bar chart's toolbar was two rows high in a tablet's
  // column then, over its title). One config for the page's life: Plotly.react redraws from scratch whenever it is
  // handed a different config.
  let plotConfig = null;

  function config() {
    if (plotConfig) return plotConfig;
    const Plotly = window.Plotly;
    const name = (gd) => {
      const file = gd.layout && gd.layout.meta && gd.layout.meta.file;
      return file ? `${file}_step${inspector.step}` : gd.closest("[id]")?.id || "figure";
    };
    const button = (format, icon) => ({ name: `download-${format}`, title: `Download as ${format.toUpperCase()}`,
      icon, click: (gd) => Plotly.downloadImage(gd, { format, filename: name(gd), scale: format === "png" ? 2 : 1 }) });
    plotConfig = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["toImage", "select2d", "lasso2d"],
                   modeBarButtonsToAdd: [button("png", Plotly.Icons.camera), button("svg", Plotly.Icons.disk)] };
    return plotConfig;
  }

  // The figure of `json` as drawn into `target`: in the layout narrow boxes get (a phone), at step index `at` (null:
  // the page's step; past the last, the last) where it is built for stepping. `stepped`: "heatmap", "bars" or null;
  // `grows`: whether its rows or keys come with the steps, its margins fitted to their labels (measured at its last
  // step: `measureMargins`); `least`: the width it needs (px, 0: none).
  function prepared(target, json, at = null) {
    const figure = JSON.parse(json); // a step works on a copy: the JSON as sent stays whole for the next step
    const meta = figure.layout.meta || {};
    // A figure that has a narrow layout (viz/whatif.py `narrowed`: the patching grids, the stream) is drawn in it in
    // a box narrower than it asks (a phone): its title's lines wrapped, a grid's panels one under another.
    const narrow = meta.narrow && (target.parentElement?.clientWidth ?? Infinity) < meta.narrow.below;
    if (narrow) {
      for (const [name, fields] of Object.entries(meta.narrow.axes)) Object.assign(figure.layout[name], fields);
      figure.layout.height = meta.narrow.height;
      figure.layout.margin = { ...figure.layout.margin, t: meta.narrow.top };
      figure.layout.title.text = meta.narrow.title;
    }
    // A heatmap of one map, and a bar chart, name every key: they are drawn at least wide enough for them; a grid of
    // maps (the model view, two models compared) as wide as a laptop draws it, its labels apart (its box scrolls
    // sideways), or, where the page fits grids to their box (`inspector.gridsFit`: a notebook's cell,
    // ui/static/notebook.js), as wide as its box, each panel naming as many keys as fit its share of it.
    const [first] = figure.data;
    const keys = first && first.x ? first.x.length : 0;
    const grid = first?.type === "heatmap" && !narrow && !!figure.layout.xaxis2;
    const fitted = grid && inspector.gridsFit;
    // On a phone a heatmap of one map has its colour bar above it, under its title: the width beside its keys is its
    // row labels' alone, and a sentence of up to ~18 keys fits the screen's width (a longer one still scrolls). Its
    // bottom is a hair under the plot's top: at the top or above, Plotly lifts the figure's title by half the bar's
    // height, into the mode bar.
    const single = first?.type === "heatmap" && !grid && !narrow;
    const above = single && PHONE.matches && first.colorbar;
    if (above) {
      for (const trace of figure.data) {
        if (!trace.colorbar) continue;
        const title = trace.colorbar.title || {};
        trace.colorbar = { ...trace.colorbar, orientation: "h", x: 0, xanchor: "left", xref: "container",
                           y: 0.999, yanchor: "bottom", yref: "paper", ypad: 2, len: 1, thickness: 10,
                           title: { ...title, side: "top" } };
      }
      figure.layout.margin = { ...figure.layout.margin, t: (figure.layout.margin?.t ?? 0) + COLORBAR_ABOVE };
      figure.layout.height += COLORBAR_ABOVE;
    }
    // A figure laid out in shares of its width (`meta.fits`: the neuron view) asks no least width; a grid that names
    // every key (two models compared) asks what its panels need (`meta.least`).
    const least = meta.fits ? 0 : first?.type === "bar" ? KEY_PX * keys + BAR_SIDES
      : first?.type !== "heatmap" || narrow || fitted ? 0 : grid ? Math.max(GRID_PX, meta.least || 0)
        : KEY_PX * keys + (above ? ROW_LABEL_SIDE : HEATMAP_SIDES);
    const box = fitted ? target.parentElement?.clientWidth || GRID_PX : GRID_PX; // read only where it counts
    if (fitted && meta.keyLabels && box < GRID_PX) {
      meta.keyFit = Math.max(2, Math.floor(meta.keyFit * (box - GRID_SIDES) / (GRID_PX - GRID_SIDES)));
    }
    const steps = meta.titles ? meta.titles.length : meta.bars ? meta.bars.length : 0;
    const step = at === null ? Math.round(inspector.step) || 1 : at + 1;
    const t = steps ? Math.min(Math.max(step, 1), steps) - 1 : 0;
    const shown = meta.titles ? figureAtStep(figure, t) : meta.bars ? barsAtStep(figure, t) : figure;
    if (fitted && meta.keyLabels && box < GRID_PX && meta.grows !== "square") { // the keys shown, thinned anew
      const every = Math.max(1, Math.ceil(meta.keyLabels.length / meta.keyFit));
      const keyText = meta.keyLabels.map((label, i) => (i % every === 0 ? label : ""));
      for (const [name, axis] of Object.entries(shown.layout)) if (name.startsWith("xaxis")) axis.ticktext = keyText;
    }
    // Only a figure whose margins Plotly fits to its labels (automargin) has its last step's margins measured: a grid
    // of maps has margins of its own at every step (measuring the model view drew it twice more, ~1 s each).
    const automargin = Object.entries(shown.layout).some(([name, axis]) => /^[xy]axis/.test(name) && axis.automargin);
    return { shown, least, stepped: meta.titles ? "heatmap" : meta.bars ? "bars" : null,
             grows: !!(meta.titles && (meta.grows || meta.frames)) && automargin };
  }

  // A heatmap that grows as it steps (rows, keys, words) is drawn at every step with the margins of its last step,
  // where its labels are longest: it keeps its place on the page, and Plotly draws each step once (a step whose new
  // label needs a wider margin than the step before is drawn twice, the second time to fit Plotly's automargin:
  // 60-70 ms instead of 25-30 here). The margins are read from Plotly's layout of the last step, drawn once per new
  // value into a hidden plot once the browser is idle; the heatmap is then redrawn with them, in the next idle time.
  const AUTOMARGIN_PAD = 12;
  const drawnValues = new WeakMap(); // target -> the JSON drawn into it
  const drawnAt = new WeakMap(); // target -> the step index it was drawn at, where not the page's step (`draw`)
  const lastMargins = new WeakMap(); // target -> { json, margin } (margin null: being measured)

  function measureMargins(target, json) {
    if (drawnValues.get(target) !== json || !target.isConnected || !target.offsetWidth) {
      if (lastMargins.get(target)?.json === json) lastMargins.delete(target); // measured when next drawn
      return;
    }
    const { shown } = prepared(target, json, Infinity);
    const measuring = Object.assign(document.createElement("div"), { className: "measuring-plot" });
    measuring.setAttribute("aria-hidden", "true");
    Object.assign(measuring.style, { position: "fixed", left: "0", top: "0", width: `${target.offsetWidth}px`,
                                     visibility: "hidden", pointerEvents: "none" });
    document.body.append(measuring);
    // Plotly's automargin leaves a pad of min(12 px, every margin) beyond the labels: margins of 12 px or more, as
    // the heatmap will have, make it leave the pad it will leave there.
    const margin = shown.layout.margin;
    for (const side of ["l", "r", "t", "b"]) margin[side] = Math.max(margin[side] ?? 0, AUTOMARGIN_PAD);
    // As the heatmap is drawn; read once Plotly is done with it (it may finish after a task: fonts, a busy page).
    window.Plotly.react(measuring, shown.data, shown.layout, config()).then(() => {
      if (lastMargins.get(target)?.json !== json) return; // another value came meanwhile
      const { l, r, t, b } = measuring._fullLayout._size; // Plotly's margins after its automargin
      lastMargins.set(target, { json, margin: { l, r, t, b } });
      whenIdle(() => { if (drawnValues.get(target) === json) draw(target, json, drawnAt.get(target) ?? null); });
    }).catch(() => lastMargins.delete(target)).finally(() => { // unmeasured, it is drawn as Plotly fits it
      window.Plotly.purge(measuring);
      measuring.remove();
    });
  }

  // A figure drawn into `target` (a `.plot` div) from its JSON (null: none), at the page's step where it is built
  // for stepping (or at step index `at`: the step an answer moves the page to, before the page has moved there);
  // returns whether it steps (a heatmap "heatmap", a bar chart "bars", or null).
  function draw(target, json, at = null) {
    if (!target || !window.Plotly) return null;
    if (!json) {
      window.Plotly.purge(target);
      drawnValues.delete(target);
      return null;
    }
    if (at === null) drawnAt.delete(target);
    else drawnAt.set(target, at);
    const { shown, least, stepped, grows } = prepared(target, json, at);
    target.style.minWidth = least ? `${least}px` : "";
    const known = lastMargins.get(target);
    const margin = grows && known?.json === json ? known.margin : null;
    if (margin) shown.layout.margin = { ...shown.layout.margin, ...margin };
    window.Plotly.react(target, shown.data, shown.layout, config());
    drawnValues.set(target, json);
    if (grows && known?.json !== json) {
      lastMargins.set(target, { json, margin: null });
      whenIdle(() => measureMargins(target, json));
    }
    return stepped;
  }

  // A plot drawn while its tab or accordion was closed has no width to fit: fit it whenever its box changes size.
  function fitting(box) {
    new ResizeObserver(() => {
      const target = box.querySelector(".plot");
      if (target && target.data && target.offsetWidth && window.Plotly) window.Plotly.Plots.resize(target);
    }).observe(box);
  }

  // `work` once the browser has painted what it is about to (the next frame), so that it does not delay it; the
  // work waiting for the same frame is done nearest `near` (an element) where the user last clicked first (the
  // chart of what heads off change, below the grid the user ticked in, before the translation's probabilities at
  // the top of the page; before any click, nearest the middle of the screen), one piece a frame: each is painted
  // before the next is drawn.
  let waiting = [];
  let clickedAt = null; // the page's y of the last pointer press
  document.addEventListener("pointerdown", (event) => { clickedAt = event.pageY; }, true);

  function afterPaint(work, near) {
    if (!waiting.length) {
      requestAnimationFrame(() => {
        const y = clickedAt === null ? window.innerHeight / 2 : clickedAt - window.scrollY; // on screen
        const distance = ({ near }) => {
          const { top, bottom } = near.getBoundingClientRect();
          return top <= y && y <= bottom ? 0 : Math.min(Math.abs(top - y), Math.abs(bottom - y));
        };
        const ordered = waiting.map((job) => [distance(job), job.work]).sort((a, b) => a[0] - b[0]);
        waiting = [];
        const next = () => {
          const [, work] = ordered.shift();
          try {
            work();
          } finally { // a figure that fails to draw leaves the others to be drawn
            if (ordered.length) requestAnimationFrame(() => setTimeout(next));
          }
        };
        setTimeout(next);
      });
    }
    waiting.push({ work, near });
  }

  // `work` once the browser has painted and has nothing more urgent to do (an idle period): a step pressed
  // meanwhile is drawn and painted first, where work after the paint would have come between the press and its
  // frame. At the latest after IDLE_WAIT_MS (→ held down leaves no idle period); after the paint where the browser
  // has no idle callbacks (Safari).
  const IDLE_WAIT_MS = 300;
  function whenIdle(work) {
    if (window.requestIdleCallback) window.requestIdleCallback(() => work(), { timeout: IDLE_WAIT_MS });
    else requestAnimationFrame(() => setTimeout(work));
  }

  // What a drawn figure does on a new step (`draw`'s answer): a heatmap is redrawn at once, a bar chart once the
  // browser has painted the heatmaps and is idle, any other figure stays as it is. A bar chart waiting is redrawn
  // once, at the step of the time it is drawn, however many steps come meanwhile (→ held down: each chart once,
  // not once per step behind it). `plot`: the chart's element.
  const barsDue = new Set();
  function redrawn(steps, redraw, plot) {
    if (steps === "heatmap") redraw();
    else if (steps === "bars" && !barsDue.has(plot)) {
      barsDue.add(plot);
      whenIdle(() => {
        barsDue.delete(plot);
        redraw();
      });
    }
  }

  // Where a figure is, for when to draw it (`target`: the figure's box, hidden while empty; `shownBy`: an element
  // around it that has a width whenever it can be seen, none in a closed tab or accordion). `value(work, later)`
  // draws a new value at once in sight (with `later`, after the paint even so), after the paint out of sight (as
  // the translation's probabilities below the first screen), and once it shows where it is hidden; `step(steps,
  // work)` redraws it on a step as `redrawn` does, or once it shows. Whether it is in sight or shown is what the
  // last layout said (asking now would force one). An empty target is not displayed: it counts as in sight where
  // `empty` is (an element where its value will show), else as out of sight.
  function placed(target, shownBy, empty = null) {
    const inSight = new Map();
    for (const watched of empty ? [target, empty] : [target]) {
      new IntersectionObserver(([entry]) => inSight.set(watched, entry.isIntersecting)).observe(watched);
    }
    const seen = () => inSight.get(target.classList.contains("empty") ? empty : target);
    let width = 0;
    let unseen = null; // the drawing that waits for it to show
    new ResizeObserver(([entry]) => {
      width = entry.contentRect.width;
      if (unseen && width) {
        const work = unseen;
        unseen = null;
        work();
      }
    }).observe(shownBy);
    return {
      value(work, later = false) {
        if (!width) unseen = work;
        else if (seen() && !later) work();
        else afterPaint(work, shownBy);
      },
      step(steps, work) {
        if (!width) unseen = steps ? work : unseen;
        else redrawn(steps, work, target);
      },
    };
  }

  inspector.figures = { afterPaint, draw, fitting, placed, redrawn };
})();
