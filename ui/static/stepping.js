// Stepping in the browser: the body of the app's `js=` event functions (step, translation, view) => outputs.
// Every figure here was built by viz/ in Python; this only picks what a step shows. With `direct` (a step),
// it redraws the plots on the page itself and returns the step's description; without (new figures after a
// translation or a view change), it returns every view for Gradio to draw.
//
// `view.attention` (and `view.overview`) is a figure that viz/views.py built at the last step, as a gr.Plot
// carries it (Plotly JSON), with `layout.meta` saying how it grows with the step: "rows" (cross-attention:
// one query row per step), "square" (decoder self-attention: rows and key columns) or null (encoder
// self-attention: only the title changes), every step's title and the stem of its download file names.
// `view.compare`, when the user compared two models, is stepped the same way (both models' rows and their
// difference). Showing step t keeps the first t + 1
// rows (and columns), moves the step's outline to row t and shows step t's title: exactly the figure
// viz/views.py builds for step t (a browser test compares the two), because its size, which tick labels a
// crowded axis shows (the others are blank) and its colour scale are the whole view's, never the step's. `translation` holds the candidates and
// probability charts, whose `layout.meta.bars` are every step's bars, and every step's description.
// Nothing here asks the server.

function figureAtStep(json, t) {
  const figure = JSON.parse(json);
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
    for (const [name, axis] of Object.entries(figure.layout)) {
      if (name.startsWith("yaxis") || (grows === "square" && name.startsWith("xaxis"))) {
        axis.categoryarray = keep(axis.categoryarray);
        axis.tickvals = keep(axis.tickvals);
        axis.ticktext = keep(axis.ticktext);
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
function barsAtStep(json, t) {
  const figure = JSON.parse(json);
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

// A figure as a gr.Plot value.
const asPlot = (figure) => (figure ? { type: "plotly", plot: JSON.stringify(figure), chart: null } : null);

if (!translation || !view || !view.attention) return direct ? [""] : [null, null, null, "", null, null];
// The one place a step is clamped: 1..steps, whatever the slider, its number box or a button sent.
const t = Math.min(Math.max(Math.round(Number(step)) || 1, 1), translation.steps) - 1;
const figures = {
  attention: figureAtStep(view.attention, t),
  candidates: barsAtStep(translation.candidates, t),
  probabilities: barsAtStep(translation.probabilities, t),
  overview: view.overview ? figureAtStep(view.overview, t) : null,
  compare: view.compare ? figureAtStep(view.compare, t) : null,
};
if (!direct) {
  const { attention, candidates, probabilities, overview, compare } = figures;
  return [asPlot(attention), asPlot(candidates), asPlot(probabilities), translation.description[t], asPlot(overview),
          asPlot(compare)];
}
// A step: redraw the plots already on the page with Plotly.react, as gr.Plot does (same layout settings and
// config) but without the full second redraw of its Plots.resize, since a step never changes their size.
// The heatmaps first; the bar charts once the browser has painted them.
function draw(ids) {
  for (const id of ids) {
    const div = document.querySelector(`#${id} .js-plotly-plot`);
    const figure = figures[id === "compare-plot" ? "compare" : id];
    if (!figure || !div || !window.Plotly) continue;
    figure.layout.autosize = true;
    figure.layout.margin = { ...figure.layout.margin, autoexpand: true };
    window.Plotly.react(div, figure.data, figure.layout, { responsive: true });
  }
}
draw(["attention", "overview", "compare-plot"]);
requestAnimationFrame(() => setTimeout(() => draw(["candidates", "probabilities"])));
return [translation.description[t]];
