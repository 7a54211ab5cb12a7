// Shared by the hands pages: report an event to the site server, and mark the page done in its URL.
// A report is a synchronous request: the server has it before the page goes on (and so before the
// mark the scripted validator asks for), so a check of the server's events after a finished run
// never races a report still in flight, or one cut off when the browser closed.
function report(page, fields) {
  const query = new URLSearchParams({page, ...fields});
  const request = new XMLHttpRequest();
  request.open("GET", "/hands/event?" + query.toString(), false);
  try { request.send(); } catch (e) { /* the server's account is the test's, not the page's */ }
}
function done(marker) {
  history.replaceState(null, "", "#" + marker);
}
