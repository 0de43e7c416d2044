(function () {
  "use strict";
  // Double-clickjacking: another site's page can put this one under the pointer between the
  // two clicks of a double-click. The buttons act only once this page has been visible and
  // focused, without a break, for DELAY_MS; losing focus or visibility starts the wait again.
  var DELAY_MS = 1000;
  var form = document.getElementById("consent-decision");
  var actions = document.getElementById("consent-actions");
  var hold = document.getElementById("consent-hold");
  if (!form || !actions) {
    return;
  }
  var buttons = actions.getElementsByTagName("button");
  var since = -1;
  var armed = null;
  function seen() {
    return document.visibilityState === "visible" && document.hasFocus();
  }
  function arm(on) {
    if (armed === on) {
      return;
    }
    armed = on;
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].disabled = !on;
    }
    form.setAttribute("data-armed", on ? "yes" : "no");
    if (hold) {
      hold.hidden = on;
    }
  }
  function check() {
    var now = performance.now();
    if (!seen()) {
      since = -1;
      arm(false);
      return;
    }
    if (since < 0) {
      since = now;
    }
    arm(now - since >= DELAY_MS);
  }
  function restart() {
    since = -1;
    arm(false);
    check();
  }
  arm(false);
  actions.hidden = false;
  window.addEventListener("focus", check);
  window.addEventListener("blur", check);
  window.addEventListener("pageshow", restart);
  document.addEventListener("visibilitychange", check);
  form.addEventListener("submit", function (event) {
    if (!armed) {
      event.preventDefault();
    }
  });
  setInterval(check, 100);
  check();
})();
