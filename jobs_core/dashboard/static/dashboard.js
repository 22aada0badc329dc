// Asks before a form marked data-confirm is sent (pausing, cancelling, removing, bulk requeue).
document.addEventListener("submit", function (e) {
  var message = e.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    e.preventDefault();
  }
}, true);

// Shows every <time data-local> (its text) and <time data-title> (its tooltip) in the viewer's
// own zone: the server wrote them in its zone, with the UTC instant in `datetime`.
function ujobsLocalTimes(root) {
  var pad = function (n) { return (n < 10 ? "0" : "") + n; };
  var shown = function (d) {
    var off = -d.getTimezoneOffset();
    var sign = off < 0 ? "-" : "+";
    off = Math.abs(off);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + " " +
      sign + pad(Math.floor(off / 60)) + pad(off % 60);
  };
  root.querySelectorAll("time[data-local], time[data-title]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (isNaN(d.getTime())) {
      return;
    }
    if (el.hasAttribute("data-local")) {
      el.textContent = shown(d);
    } else {
      el.setAttribute("title", shown(d));
    }
  });
}
document.addEventListener("DOMContentLoaded", function () { ujobsLocalTimes(document); });
document.addEventListener("htmx:afterSettle", function (e) { ujobsLocalTimes(e.target); });
