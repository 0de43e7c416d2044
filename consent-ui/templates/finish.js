(function () {
  "use strict";
  // Back from GitHub: hand back the value the consent page kept in this origin's session
  // storage (consent.js), once. If there is none, or the server did not take it (the address
  // already carries one), the page stays and asks the person to confirm.
  var KEY = "mcp-oauth-proxy.flow-proof";
  var FIELD = "flow_proof";
  var params = new URLSearchParams(window.location.search);
  if (params.has(FIELD)) {
    return;
  }
  var value = null;
  try {
    value = window.sessionStorage.getItem(KEY);
    window.sessionStorage.removeItem(KEY);
  } catch (e) {
    value = null;
  }
  if (!value) {
    return;
  }
  params.append(FIELD, value);
  window.location.replace(window.location.pathname + "?" + params.toString());
})();
