async () => {
  // The step slider's range: as many steps as the core view's lines (ui/static/core.js keeps their number), set
  // here in the page once the core view has taken a value, and only when it changes. (Sent from the server as a
  // property update, the slider was rebuilt by Gradio at every translation, ~5% of the throughput of
  // benchmarks/load.py.) A property update returned by a page function is applied as the server's would be.
  await new Promise((resolve) => setTimeout(resolve)); // the core view takes its value first
  const inspector = window.attentionInspector || {};
  const steps = inspector.steps || 0;
  if (steps === inspector.ranged) return undefined; // the slider as it is
  inspector.ranged = steps;
  return { __type__: "update", maximum: Math.max(steps, 2), interactive: steps > 1 };
}
