// Asks before a form marked data-confirm is sent (pausing, cancelling, removing, bulk requeue).
document.addEventListener("submit", function (e) {
  var message = e.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    e.preventDefault();
  }
}, true);
