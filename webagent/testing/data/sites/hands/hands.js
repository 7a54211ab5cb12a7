// Shared by the hands pages: report an event to the site server, and mark the page done in its URL.
function report(page, fields) {
  const query = new URLSearchParams({page, ...fields});
  return fetch("/hands/event?" + query.toString(), {cache: "no-store"}).catch(() => {});
}
function done(marker) {
  history.replaceState(null, "", "#" + marker);
}
