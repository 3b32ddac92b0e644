// A plot the page owns (ui/plots.py): `props.value` is a figure's JSON as viz/ builds it, or null (no plot), drawn
// by the page's shared figures (ui/static/figures.js): at the page's step where it is built for stepping, and again
// on every "attention-inspector-step" event; nothing asks the server.
const figures = window.attentionInspector.figures;
let steps = null; // "heatmap", "bars" or null: what the drawn figure does on a step

function draw() {
  element.classList.toggle("empty", !props.value);
  steps = figures.draw(element.querySelector(".plot"), props.value);
}

// A new value is drawn at once where the user sees the plot; out of sight (below the core view, as the
// translation's probabilities are), once the browser has painted what is in sight; in a closed tab or accordion,
// once it opens (its box gets a size), at the page's step then.
// (An empty plot is not displayed: its first value waits for the paint, as out of sight, where the layout that
// value brings is known.)
let inSight = false;
new IntersectionObserver(([entry]) => { inSight = entry.isIntersecting; }).observe(element);
let unseen = false; // a value or a step came while the plot was not shown
// Shown: its box has a width (a closed tab's is 0), as the last layout gave it (asking now would force a layout).
const box = element.parentElement;
let shownWidth = 0;
const shown = () => shownWidth > 0;
watch("value", () => {
  if (!shown()) unseen = true;
  else if (inSight) draw();
  else figures.afterPaint(draw, box);
});
document.addEventListener("attention-inspector-step", () => {
  if (!shown()) unseen = true;
  else figures.redrawn(steps, draw);
});
new ResizeObserver(([entry]) => {
  shownWidth = entry.contentRect.width;
  if (unseen && shown()) {
    unseen = false;
    draw();
  }
}).observe(box);
figures.fitting(element);
draw();
