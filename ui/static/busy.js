// A request refused at the server's door (ui/door.py answers 503 with a "busy, try again" message) says so where the
// user looks: Gradio's page only marks the waiting component "Error". Loaded in the page's <head>, before Gradio's
// client takes `fetch`, so every request it sends passes here; nothing else is changed.
(() => {
  const fetched = window.fetch.bind(window);
  window.fetch = async (...args) => {
    const response = await fetched(...args);
    const url = String(args[0] && args[0].url ? args[0].url : args[0]);
    if (response.status === 503 && url.includes("/gradio_api/run/")) {
      response.clone().json()
        .then((body) => window.attentionInspector?.said?.(body.error, { always: true }))
        .catch(() => {});
    }
    return response;
  };
})();
