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
  // The browser-bound return: a random value kept in this origin's own session storage and
  // sent with the decision; when GitHub sends this browser back, the callback page sends it
  // again. Another port of this host can put cookies into this browser, but can neither read
  // nor write this origin's storage. Without storage the callback asks for a confirmation.
  var proof = document.getElementById("flow-proof");
  function keepProof() {
    if (!proof) {
      return;
    }
    try {
      var bytes = new Uint8Array(32);
      window.crypto.getRandomValues(bytes);
      var text = "";
      for (var i = 0; i < bytes.length; i++) {
        text += String.fromCharCode(bytes[i]);
      }
      var value = btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
      window.sessionStorage.setItem("mcp-oauth-proxy.flow-proof", value);
      proof.value = value;
    } catch (e) {
      proof.value = "";
    }
  }
  form.addEventListener("submit", function (event) {
    if (!armed) {
      event.preventDefault();
      return;
    }
    keepProof();
  });
  setInterval(check, 100);
  check();
})();
