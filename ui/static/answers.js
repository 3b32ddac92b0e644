// A tab's answers (ui/plots.py `answers_view`): `props.value` is a JSON object with the revision of the state they
// answer and the answers an event gave by name (a figure's JSON, a table {headers, rows}, a text); the answers it
// leaves out stay as they are. They are about the decoding on screen: once the core view draws another decoding
// (ui/static/core.js: "attention-inspector-decoding"), every answer of an older revision is emptied, and an answer
// of an older revision than that decoding is never drawn. Answers about one step (`step`) are faded, with a note
// saying so, while the page shows another step; answers left on screen by a refused question (`aside`: what they
// are about) are faded under that note until the next answer.
const inspector = window.attentionInspector;
const figures = inspector.figures;
let revision = -1;
let askedAt = null; // the step the answers are about, if they are about one
let aside = null; // what the answers on screen are about, where a question since was refused
const note = Object.assign(document.createElement("div"), { className: "answers-note", hidden: true });
element.prepend(note);

function markStep() {
  const shown = !!element.querySelector(".answer:not(.empty)");
  const other = shown && askedAt !== null && askedAt !== inspector.step;
  element.classList.toggle("other-step", other || (shown && !!aside));
  note.hidden = !(other || (shown && aside));
  if (shown && aside) note.textContent = aside;
  else if (other) note.textContent = `About step ${askedAt}; the view shows step ${inspector.step}: ask again for it.`;
}
const figuresShown = {}; // each figure's JSON, and what it does on a step (figures.draw's answer)
const placed = {}; // where each figure is (figures.placed: in sight, out of sight, in a closed tab)
const tables = {}; // each table's value and how it is sorted

function drawTable(box) {
  const { table, column, descending } = tables[box.id];
  const target = box.querySelector(".answer-table");
  target.replaceChildren();
  if (!table) return;
  const rows = [...table.rows];
  if (column !== null) {
    const key = (row) => row[column];
    rows.sort((a, b) => {
      const [x, y] = [key(a), key(b)];
      if (x === null || y === null) return (x === null) - (y === null); // empty cells last
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return descending ? -order : order;
    });
  }
  const made = (tag, text) => Object.assign(document.createElement(tag), { textContent: text ?? "" });
  const head = document.createElement("tr");
  table.headers.forEach((header, i) => {
    const cell = made("th", header + (i === column ? (descending ? " ▼" : " ▲") : ""));
    cell.title = "Sort by this column";
    cell.addEventListener("click", () => {
      tables[box.id] = { table, column: i, descending: column === i ? !descending : false };
      drawTable(box);
    });
    head.appendChild(cell);
  });
  const body = document.createElement("tbody");
  for (const row of rows) {
    const line = document.createElement("tr");
    for (const value of row) line.appendChild(made("td", value));
    body.appendChild(line);
  }
  const thead = document.createElement("thead");
  thead.appendChild(head);
  const drawn = document.createElement("table");
  drawn.append(thead, body);
  target.appendChild(drawn);
}

function drawAnswer(box, value) {
  const none = value === null || value === undefined || value === "";
  box.classList.toggle("empty", none);
  if (box.classList.contains("figure")) {
    // Emptied, a figure is only hidden: the next value is drawn over it, a redraw (a first drawing takes about
    // twice as long: 95 against 45 ms for the deletion curves).
    const json = none ? null : value;
    figuresShown[box.id] = { json, steps: none ? null : figures.draw(box.querySelector(".plot"), json) };
  } else if (box.classList.contains("table")) {
    tables[box.id] = { table: none ? null : value, column: null, descending: false };
    drawTable(box);
  } else box.querySelector(".answer-text").textContent = none ? "" : value;
  if (!none) box.dispatchEvent(new CustomEvent("attention-inspector-answer", { bubbles: true })); // drawn (page.js)
}

// A figure is drawn where it is (figures.placed: at once in sight, after the paint out of sight, once its tab opens
// where closed), from the JSON it has then; a table or a text at once. An empty figure below another one drawn at
// once (`below`) will be out of sight: it is drawn after the paint.
function answered(box, value, below) {
  if (!box.classList.contains("figure")) return drawAnswer(box, value);
  figuresShown[box.id] = { json: value, steps: figuresShown[box.id]?.steps ?? null };
  placed[box.id].value(() => drawAnswer(box, figuresShown[box.id].json), below && box.classList.contains("empty"));
}

function update() {
  if (!props.value) return;
  const value = JSON.parse(props.value);
  if (value.revision < Math.max(revision, inspector.decoding ?? -1)) return; // about a state the page has left
  revision = value.revision;
  aside = value.aside ?? null;
  if (aside) return markStep(); // a refused question: the answers as they are, marked
  askedAt = value.step ?? null;
  let below = false;
  for (const box of element.querySelectorAll(".answer")) { // in the order they show
    if (!(box.id in value.answers)) continue;
    answered(box, value.answers[box.id], below);
    below ||= box.classList.contains("figure") && !!value.answers[box.id];
  }
  markStep();
}

document.addEventListener("attention-inspector-decoding", () => {
  if (revision >= inspector.decoding) return;
  for (const box of element.querySelectorAll(".answer")) { // those drawn, and figures waiting to be
    if (!box.classList.contains("empty") || figuresShown[box.id]?.json) drawAnswer(box, null);
  }
  markStep();
});
document.addEventListener("attention-inspector-step", () => {
  markStep();
  for (const [name, { steps }] of Object.entries(figuresShown)) {
    const box = element.querySelector(`#${name}`);
    placed[name].step(steps, () => drawAnswer(box, figuresShown[name].json));
  }
});
for (const box of element.querySelectorAll(".answer.figure")) {
  figures.fitting(box);
  placed[box.id] = figures.placed(box, element, element); // an answer shows in the answers (below the button)
}
for (const button of element.querySelectorAll(".answer.text .copy")) {
  button.addEventListener("click", () => navigator.clipboard?.writeText(button.previousSibling.textContent));
}
watch("value", update);
update();
