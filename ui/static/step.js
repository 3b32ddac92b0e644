(step, descriptions) => {
  // The page's step, 1..steps whatever the slider, its number box or a button sent (the step's text holds every
  // step's description): every plot and the step's text redraw themselves at it (ui/static/plot.js), and the
  // slider shows it.
  const inspector = (window.attentionInspector = window.attentionInspector || { step: 1 });
  const steps = descriptions ? JSON.parse(descriptions).length : 1;
  const t = Math.min(Math.max(Math.round(Number(step)) || 1, 1), steps);
  inspector.step = t;
  document.dispatchEvent(new CustomEvent("attention-inspector-step"));
  return t;
}
