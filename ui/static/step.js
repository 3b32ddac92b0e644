async (step) => {
  // The page's step, 1..steps whatever the slider, its number box or the server sent (the core view keeps the
  // number of steps: ui/static/core.js): every plot, the core view and the step's line redraw themselves at it. A
  // value the slider has already left is dropped: its newer value's change comes next (two quick presses of →: 2
  // taken after 3 would undo the second). A step button has drawn its step itself (ui/static/page.js), and its value
  // comes back here as the step on screen: nothing to redraw. The slider is written back only to correct a step out
  // of range. A new decoding's step comes with its steps in the same answer: the core view takes them first (a task
  // later), so the step is kept within the new decoding's steps, not the last one's.
  await new Promise((resolve) => setTimeout(resolve));
  const inspector = (window.attentionInspector = window.attentionInspector || { step: 1 });
  const box = document.querySelector("#step input[type=number]"); // none in a notebook's page (ui/static/notebook.js)
  if (box && box.value !== "" && Number(box.value) !== Number(step)) return undefined;
  const steps = inspector.steps || Infinity; // not known before the core view has drawn its first value
  const t = Math.min(Math.max(Math.round(Number(step)) || 1, 1), steps);
  if (t !== inspector.step) {
    inspector.step = t;
    document.dispatchEvent(new CustomEvent("attention-inspector-step"));
  }
  return t === Number(step) ? undefined : t; // undefined: no output, the slider as it is
}
