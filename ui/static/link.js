// "Copy link": the view's query (ui/links.py, sent with the view's frames) with the step the page is on, as a URL
// of this page; copied to the clipboard where the browser allows it, and returned for the link box.
(view, step) => {
  if (!view || !view.link) return "Translate a sentence first: there is no view to link to.";
  const params = new URLSearchParams(view.link);
  params.set("step", String(Math.max(1, Math.round(Number(step)) || 1)));
  const url = `${window.location.origin}${window.location.pathname}?${params}`;
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(url).catch(() => {});
  return url;
}
