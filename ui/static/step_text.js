// The step's description (ui/plots.py `step_text`): `props.value` is every step's, as a JSON list; shown as text
// (never markup) at the page's step, and again at every "attention-inspector-step" event.
const inspector = (window.attentionInspector = window.attentionInspector || { step: 1 });

function show() {
  const box = element.querySelector(".step-text");
  if (!box) return;
  const lines = props.value ? JSON.parse(props.value) : [];
  const t = Math.min(Math.max(Math.round(inspector.step) || 1, 1), Math.max(lines.length, 1)) - 1;
  box.textContent = lines.length ? lines[t] : "";
}

watch("value", show);
document.addEventListener("attention-inspector-step", show);
show();
