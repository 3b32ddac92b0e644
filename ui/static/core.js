// The core view (ui/plots.py `core_view`): the translation, the status line, whether the translation rests on its
// source, the heatmap, the step's line and its candidates, drawn from one value. `props.value` is a JSON object
// with the revision of the state it belongs to and the parts an answer changed ("translation", "status",
// "detachment": a plain verdict line, the numbers behind it, the translation's tokens or words and the source's
// words, each [text, marked, what it scored], "steps": every step's line, "attention" and "candidates": figures'
// JSON, "neuron": the neuron view's figure and note, or null); parts it leaves out stay as they are.
// Text is set as text, never as HTML. An answer of an older revision than the one drawn is dropped: a late answer
// never draws over a newer state. The figures are drawn by the page's shared figures (ui/static/figures.js), at
// the page's step, and again on every "attention-inspector-step" event.
const inspector = window.attentionInspector;
const figures = inspector.figures;
const shown = { revision: -1, translation: "", status: "", steps: [], attention: null, candidates: null,
                neuron: null };
const drawn = { attention: null, candidates: null, neuron: null }; // what each figure does on a step

function stepLine() {
  const t = Math.min(Math.max(Math.round(inspector.step) || 1, 1), Math.max(shown.steps.length, 1)) - 1;
  element.querySelector("#step-text .step-text").textContent = shown.steps.length ? shown.steps[t] : "";
}

// The verdict: one plain line (each phrase it names hovering its evidence), the numbers behind it under "why?" (a
// click opens and closes them), the translation's words (those that may be made up underlined) and the source's
// words (those that may be left out or mistranslated marked), each word's hover saying what it scored.
function drawWords(line, words, className) {
  line.replaceChildren();
  for (const [text, marked, said] of words || []) {
    const word = document.createElement("span");
    word.textContent = text;
    word.title = said;
    if (marked) word.className = className;
    line.append(word, " ");
  }
}

function drawDetachment(part) {
  const box = element.querySelector("#detachment");
  drawWords(box.querySelector(".detachment-words"), part?.words, "detached");
  drawWords(box.querySelector(".detachment-source"), part?.source, "left-out");
  const plain = box.querySelector(".detachment-plain");
  plain.replaceChildren();
  for (const [text, said] of part?.plain_parts?.length ? part.plain_parts : [[part?.plain || "", ""]]) {
    const piece = document.createElement("span"); // a named phrase's hover: its words' evidence
    piece.textContent = text;
    if (said) piece.title = said;
    plain.append(piece);
  }
  box.querySelector(".detachment-verdict").textContent = part?.verdict || "";
  box.classList.toggle("flagged", !!part?.detached);
  box.classList.toggle("empty", !part?.plain);
}

// The neuron view (ui/neurons.py `neuron_part`): its figure, drawn at the page's step like the heatmap, and what q and
// k are, as text; null closes it. A tap on a heatmap's cell (ui/static/page.js) hides the figure until the tap's
// answer (the status line says one) is drawn, at the step the answer moves the page to (the slider moves it a task
// later: ui/static/step.js): the row shown before is not the row tapped.
let tapped = false;
inspector.neuronTapped = () => {
  tapped = true;
  neuronHidden(true);
};

function neuronHidden(hidden) {
  const box = element.querySelector("#neuron");
  box.toggleAttribute("aria-busy", hidden);
  box.querySelector(".plot").style.visibility = hidden ? "hidden" : "";
}

function drawNeuron(part) {
  const box = element.querySelector("#neuron");
  box.querySelector(".neuron-note").textContent = part?.note || "";
  shown.neuron = part?.figure || null;
  drawFigure("neuron", tapped && part?.step ? part.step - 1 : null);
}

function drawFigure(name, at = null) {
  const box = element.querySelector(`#${name}`);
  box.classList.toggle("empty", !shown[name]);
  drawn[name] = figures.draw(box.querySelector(".plot"), shown[name], at);
}

function update() {
  if (!props.value) return;
  const value = JSON.parse(props.value);
  if (value.revision < shown.revision) return; // an answer to a state the page has left
  shown.revision = inspector.revision = value.revision; // 0: the page as built, before its first answer
  if ("translation" in value) {
    inspector.decoding = value.revision;
    document.dispatchEvent(new CustomEvent("attention-inspector-decoding"));
  }
  if ("sentence" in value) { // the sentence translated: the page says when the box holds another (page.js)
    inspector.sentence = value.sentence;
    document.dispatchEvent(new CustomEvent("attention-inspector-sentence"));
  }
  for (const name of ["translation", "status"]) {
    if (name in value) {
      shown[name] = value[name] || "";
      element.querySelector(`#${name} textarea`).value = shown[name]; // as tall as what it says (style.css)
    }
  }
  if ("status" in value) inspector.said?.(shown.status);
  if ("detachment" in value) drawDetachment(value.detachment);
  if ("neuron" in value) drawNeuron(value.neuron);
  if (tapped && ("neuron" in value || "status" in value)) { // the tap's answer (a refusal says only a status)
    tapped = false;
    neuronHidden(false);
  }
  if ("steps" in value) {
    shown.steps = value.steps || [];
    inspector.steps = shown.steps.length;
    stepLine();
  }
  // The heatmap at once, the candidates once the browser has painted it (as on a step, below).
  for (const name of ["attention", "candidates"]) {
    if (name in value && value[name] !== shown[name]) {
      shown[name] = value[name];
      if (name === "attention") drawFigure(name);
      else figures.afterPaint(() => drawFigure(name), element.querySelector(`#${name}`));
    }
  }
}

// A new step: the step's line and the heatmap at once, the candidates once the browser has painted them and is idle.
document.addEventListener("attention-inspector-step", () => {
  stepLine();
  for (const name of ["attention", "neuron", "candidates"]) {
    figures.redrawn(drawn[name], () => drawFigure(name), element.querySelector(`#${name}`));
  }
});
element.querySelector("#detachment .detachment-why").addEventListener("click", (event) => {
  const numbers = element.querySelector("#detachment .detachment-verdict");
  numbers.hidden = !numbers.hidden;
  event.currentTarget.setAttribute("aria-expanded", String(!numbers.hidden));
});
watch("value", update);
for (const name of ["attention", "neuron", "candidates"]) figures.fitting(element.querySelector(`#${name}`));
update();
