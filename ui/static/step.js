async (step) => {
  // The page's step, 1..steps whatever the slider, its number box or a button sent (the core view keeps the number
  // of steps: ui/static/core.js): every plot, the core view and the step's line redraw themselves at it. The slider
  // is written back only to correct a step out of range: written back as is, this step would undo a newer one the
  // slider took meanwhile (two quick presses of →: 2 written back after 3, the page stayed at 2). A new decoding's
  // step comes with its steps in the same answer: the core view takes them first (a task later), so the step is
  // kept within the new decoding's steps, not the last one's.
  await new Promise((resolve) => setTimeout(resolve));
  const inspector = (window.attentionInspector = window.attentionInspector || { step: 1 });
  const steps = inspector.steps || Infinity; // not known before the core view has drawn its first value
  const t = Math.min(Math.max(Math.round(Number(step)) || 1, 1), steps);
  inspector.step = t;
  if (inspector.asked?.to === t) inspector.asked = null; // a step button's press has arrived (page.js `moved`)
  document.dispatchEvent(new CustomEvent("attention-inspector-step"));
  return t === Number(step) ? undefined : t; // undefined: no output, the slider as it is
}
