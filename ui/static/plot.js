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
// translation's probabilities are), once the browser has painted what is in sight, nearest where the user clicked
// first; in a closed tab or accordion, once it opens, at the page's step then. (An empty plot is not displayed: its
// first value waits for the paint, where the layout that value brings is known.)
const place = figures.placed(element, element.parentElement);
watch("value", () => place.value(draw));
document.addEventListener("attention-inspector-step", () => place.step(steps, draw));
figures.fitting(element);
draw();
