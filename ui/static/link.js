(query) => {
  // "Copy link": the link's query (made by the server, ui/links.py) as a URL of this page, copied to the clipboard
  // where the browser allows it; anything else (a message) stays as it is.
  if (typeof query !== "string" || !query.startsWith("?")) return query;
  const url = `${window.location.origin}${window.location.pathname}${query}`;
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(url).catch(() => {});
  return url;
}
