// A plot the page owns (ui/plots.py): `props.value` is a figure's JSON as viz/ builds it, or null (no plot), drawn
// by the page's shared figures (ui/static/figures.js): at the page's step where it is built for stepping, and again
// on every "attention-inspector-step" event; nothing asks the server.
const figures = window.attentionInspector.figures;
let steps = null; // "heatmap", "bars" or null: what the drawn figure does on a step

// Emptied, a plot is only hidden: its next value is drawn over the figure it had, a redraw (a first drawing takes
// about twice as long).
function draw() {
  element.classList.toggle("empty", !props.value);
  steps = props.value ? figures.draw(element.querySelector(".plot"), props.value) : null;
}

// A new value is drawn at once where the user sees the plot; out of sight (below the core view, as the
// translation's probabilities are), once the browser has painted what is in sight, nearest where the user clicked
// first; in a closed tab or accordion, once it opens, at the page's step then. (An empty plot is not displayed.
// In a tab, its first value is drawn at once where the tab is in sight: the chart of what heads off change shows
// right below the grid the user ticked a head in. Above the tabs, it waits for the paint, where the layout of the
// answer that fills it is known: the translation's probabilities move down with the first heatmap.)
// A chart that comes second to the rest of an answer (ui/plots.py `plot`'s `after_paint`) waits for the paint even
// in sight.
const place = figures.placed(element, element.parentElement, element.closest('[role="tabpanel"]'));
const later = element.classList.contains("after-paint");
watch("value", () => place.value(draw, later));
document.addEventListener("attention-inspector-step", () => place.step(steps, draw));
figures.fitting(element);
draw();
