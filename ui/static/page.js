() => {
  // ←/→ step when the page has the focus outside a text field (Gradio's button click, as a mouse would).
  document.addEventListener("keydown", (event) => {
    const target = event.target instanceof Element ? event.target : document.body;
    const typing = target.closest("input, textarea, select, [contenteditable]");
    if (typing || event.altKey || event.ctrlKey || event.metaKey) return;
    const button = {ArrowRight: "#next", ArrowLeft: "#previous", Home: "#first", End: "#last"}[event.key];
    if (button && document.querySelector(button)) { event.preventDefault(); document.querySelector(button).click(); }
  });

  // A click on a candidate's bar branches there; a click on a head of the importance heatmap opens it. Plots send
  // no clicks to Python: the click fills the text field beside the plot and presses its button, as a user would.
  const targets = {candidates: ["#branch-word", "#branch"], importance: ["#open-head", "#open-head-button"]};
  const bind = () => {
    for (const [id, [field, button]] of Object.entries(targets)) {
      const plot = document.querySelector(`#${id} .js-plotly-plot`);
      if (!plot || !plot.on || plot.dataset.clicks) continue;
      plot.dataset.clicks = "bound";
      plot.on("plotly_click", (event) => {
        const value = event.points && event.points[0] && event.points[0].customdata;
        const input = document.querySelector(`${field} textarea, ${field} input`);
        if (typeof value !== "string" || !input) return;
        input.value = value;
        input.dispatchEvent(new Event("input", {bubbles: true}));
        setTimeout(() => document.querySelector(button).click(), 50);
      });
    }
  };
  new MutationObserver(bind).observe(document.body, {childList: true, subtree: true});

  // A plot drawn while its tab was hidden has no width to fit: fit every plot of a tab when it is shown.
  document.addEventListener("click", (event) => {
    if (!(event.target instanceof Element) || !event.target.closest("[role=tab]")) return;
    requestAnimationFrame(() => setTimeout(() => {
      for (const gd of document.querySelectorAll(".js-plotly-plot")) {
        if (gd.offsetParent !== null && window.Plotly) window.Plotly.Plots.resize(gd);
      }
    }, 30));
  });

  // Every plot's toolbar downloads PNG and SVG, named after the view and step (layout.meta.file, set by
  // viz/views.py) or else the plot's element id.
  const name = (gd) => {
    const file = gd.layout && gd.layout.meta && gd.layout.meta.file;
    const step = document.querySelector("#step input[type=number]")?.value || "1";
    return file ? `${file}_step${step}` : (gd.closest("[id]")?.id || "figure");
  };
  const configure = () => {
    const Plotly = window.Plotly;
    if (!Plotly || !Plotly.setPlotConfig) return setTimeout(configure, 200);
    const button = (format, icon) => ({name: `download-${format}`, title: `Download as ${format.toUpperCase()}`,
      icon, click: (gd) => Plotly.downloadImage(gd, {format, filename: name(gd), scale: format === "png" ? 2 : 1})});
    Plotly.setPlotConfig({displaylogo: false, modeBarButtonsToRemove: ["toImage"],
                          modeBarButtonsToAdd: [button("png", Plotly.Icons.camera), button("svg", Plotly.Icons.disk)]});
    for (const gd of document.querySelectorAll(".js-plotly-plot")) Plotly.react(gd, gd.data, gd.layout, {responsive: true});
  };
  configure();
}
