/* Impri on a phone: the service worker (installable inbox), push notifications, passkeys.
 * A static file (the CSP forbids inline scripts); nothing here builds HTML from strings. */
(function () {
  "use strict";

  const body = document.body;

  // --- The installable inbox ------------------------------------------------------------
  const workerUrl = body.dataset.serviceWorker;
  const registered = workerUrl && "serviceWorker" in navigator
    ? navigator.serviceWorker.register(workerUrl, { scope: "/inbox/" }).then(function (registration) {
        body.dataset.serviceWorkerState = "registered";
        return registration;
      }).catch(function () {
        body.dataset.serviceWorkerState = "failed";
        return null;
      })
    : Promise.resolve(null);
  window.impriServiceWorker = registered;

  // --- Push notifications: one button, the browser's permission prompt --------------------
  function csrfToken() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (field) return field.value;
    const match = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function keyBytes(b64url) {
    const text = atob(b64url.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((b64url.length + 3) % 4));
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    return bytes;
  }

  function send(url, method, data) {
    return fetch(url, {
      method: method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(data),
    }).then(function (response) {
      if (response.ok) return response.status === 204 ? {} : response.json();
      return response.json().catch(function () { return {}; }).then(function (answer) {
        throw new Error(answer.error || "the server answered " + response.status);
      });
    });
  }

  // The browser's push service (Google's for Chrome, Mozilla's for Firefox, Apple's for Safari)
  // can hang rather than refuse when it can't be reached: after this long, say so.
  const PUSH_WAIT_MS = 20000;
  const UNREACHABLE = "this browser's push service could not be reached (Chrome uses Google's, " +
    "Firefox Mozilla's, Safari Apple's). Check this device's connection, or a firewall or VPN " +
    "in the way, then try again.";

  function unreachable() {
    const error = new Error(UNREACHABLE);
    error.name = "AbortError";
    return error;
  }

  function within(ms, promise) {
    return new Promise(function (resolve, reject) {
      const timer = window.setTimeout(function () { reject(unreachable()); }, ms);
      promise.then(
        function (value) { window.clearTimeout(timer); resolve(value); },
        function (error) { window.clearTimeout(timer); reject(error); });
    });
  }

  // What went wrong, in words a reviewer can act on (the browsers' own are terse, or empty).
  function pushProblem(error) {
    const text = (error && error.message) || "";
    if ((error && error.name === "NotAllowedError") || /permission|not allowed/i.test(text)) {
      return "notifications are not allowed for this site: allow them in the browser's site settings, then try again.";
    }
    if (text === UNREACHABLE) return text;
    if ((error && error.name === "AbortError") || /push service/i.test(text) || !text) return UNREACHABLE;
    return text;
  }

  function pushKey(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (response) {
      if (!response.ok) throw new Error("Impri did not give its push key (it answered " + response.status + ")");
      return response.json();
    }, function () {
      throw new Error("Impri could not be reached: check the connection, then try again.");
    });
  }

  function setUpPush(control) {
    const on = control.querySelector("[data-push-on]");
    const off = control.querySelector("[data-push-off]");
    const status = control.querySelector("[data-push-status]");
    const say = function (text) { status.textContent = text; };
    if (!("PushManager" in window) || !("Notification" in window) || !("serviceWorker" in navigator)) {
      say("This browser cannot show notifications from Impri" +
        (/iPhone|iPad/.test(navigator.userAgent) ? " until you add it to your home screen." : "."));
      return;
    }
    function show(subscribed) {
      control.dataset.pushState = subscribed ? "on" : "off";
      on.hidden = subscribed;
      off.hidden = !subscribed;
    }
    registered.then(function (registration) {
      if (!registration) return show(false);
      return registration.pushManager.getSubscription().then(function (existing) {
        show(!!existing);
        // This browser may have been turned on by someone else signed in before (a shared
        // computer): register it for whoever is signed in now. The server holds a second
        // reviewer's registration until the first one's goes (docs/inbox.md, "Shared browsers").
        if (existing) send(control.dataset.subscriptionsUrl, "POST", existing.toJSON()).catch(function () {});
      });
    });
    if (Notification.permission === "denied") say("Notifications are blocked for this site in the browser's settings.");

    on.addEventListener("click", function () {
      on.disabled = true;
      say("Turning on notifications…");
      Notification.requestPermission().then(function (permission) {
        if (permission !== "granted") throw new Error("notifications were not allowed");
        return Promise.all([navigator.serviceWorker.ready, pushKey(control.dataset.keyUrl)]);
      }).then(function (both) {
        const options = { userVisibleOnly: true, applicationServerKey: keyBytes(both[1].publicKey) };
        return within(PUSH_WAIT_MS, both[0].pushManager.subscribe(options));
      }).then(function (subscription) {
        return send(control.dataset.subscriptionsUrl, "POST", subscription.toJSON());
      }).then(function () {
        show(true);
        say("Notifications are on for this device.");
      }).catch(function (error) {
        show(false);
        say("Notifications are off: " + pushProblem(error));
      }).finally(function () { on.disabled = false; });
    });

    off.addEventListener("click", function () {
      off.disabled = true;
      registered.then(function (registration) {
        return registration && registration.pushManager.getSubscription();
      }).then(function (subscription) {
        if (!subscription) return null;
        const endpoint = subscription.endpoint;
        return subscription.unsubscribe().then(function () {
          return send(control.dataset.subscriptionsUrl, "DELETE", { endpoint: endpoint }).catch(function () { return null; });
        });
      }).then(function () {
        show(false);
        say("Notifications are off for this device.");
      }).finally(function () { off.disabled = false; });
    });
  }

  document.querySelectorAll("[data-push-control]").forEach(setUpPush);

  // --- Passkeys (WebAuthn): the browser's half of each ceremony ---------------------------
  function toBuffer(b64url) { return keyBytes(b64url).buffer; }

  function toB64url(buffer) {
    const bytes = new Uint8Array(buffer);
    let text = "";
    for (let i = 0; i < bytes.length; i++) text += String.fromCharCode(bytes[i]);
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function creationOptions(json) {
    const o = Object.assign({}, json);
    o.challenge = toBuffer(json.challenge);
    o.user = Object.assign({}, json.user, { id: toBuffer(json.user.id) });
    o.excludeCredentials = (json.excludeCredentials || []).map(function (c) { return Object.assign({}, c, { id: toBuffer(c.id) }); });
    return o;
  }

  function requestOptions(json) {
    const o = Object.assign({}, json);
    o.challenge = toBuffer(json.challenge);
    o.allowCredentials = (json.allowCredentials || []).map(function (c) { return Object.assign({}, c, { id: toBuffer(c.id) }); });
    return o;
  }

  function credentialJSON(credential) {
    const r = credential.response;
    const response = { clientDataJSON: toB64url(r.clientDataJSON) };
    if (r.attestationObject) {
      response.attestationObject = toB64url(r.attestationObject);
      if (r.getTransports) response.transports = r.getTransports();
    } else {
      response.authenticatorData = toB64url(r.authenticatorData);
      response.signature = toB64url(r.signature);
      if (r.userHandle) response.userHandle = toB64url(r.userHandle);
    }
    return {
      id: credential.id,
      rawId: toB64url(credential.rawId),
      type: credential.type,
      response: response,
      clientExtensionResults: credential.getClientExtensionResults ? credential.getClientExtensionResults() : {},
      authenticatorAttachment: credential.authenticatorAttachment || null,
    };
  }

  // Ask for options, run the ceremony, post the result: resolves with the server's answer.
  function ceremony(optionsUrl, url, create, extra) {
    return send(optionsUrl, "POST", {}).then(function (options) {
      return create
        ? navigator.credentials.create({ publicKey: creationOptions(options) })
        : navigator.credentials.get({ publicKey: requestOptions(options) });
    }).then(function (credential) {
      if (!credential) throw new Error("no passkey was given");
      return send(url, "POST", Object.assign({ credential: credentialJSON(credential) }, extra || {}));
    });
  }

  function passkeysWork() { return "PublicKeyCredential" in window && navigator.credentials; }

  document.querySelectorAll("[data-passkey-register]").forEach(function (box) {
    const button = box.querySelector("[data-passkey-register-button]");
    const status = box.querySelector("[data-passkey-status]");
    if (!passkeysWork()) { button.disabled = true; status.textContent = "This browser has no passkeys."; return; }
    button.addEventListener("click", function () {
      button.disabled = true;
      status.textContent = "Follow your device's prompt…";
      const name = (document.getElementById("passkey-name") || {}).value || "";
      ceremony(box.dataset.optionsUrl, box.dataset.url, true, { name: name }).then(function () {
        status.textContent = "Passkey added.";
        window.location.assign(box.dataset.next || window.location.pathname);
      }).catch(function (error) {
        status.textContent = "No passkey was added: " + error.message;
      }).finally(function () { button.disabled = false; });
    });
  });

  document.querySelectorAll("[data-passkey-verify]").forEach(function (box) {
    const button = box.querySelector("[data-passkey-verify-button]");
    const status = box.querySelector("[data-passkey-status]");
    button.addEventListener("click", function () {
      button.disabled = true;
      status.textContent = "";
      ceremony(box.dataset.optionsUrl, box.dataset.url, false, { step_up: "stepUp" in box.dataset }).then(function (answer) {
        window.location.assign(answer.next || "/inbox/");
      }).catch(function (error) {
        status.textContent = "The passkey did not verify: " + error.message;
      }).finally(function () { button.disabled = false; });
    });
  });

  // Step-up on the action page: pressing Approve asks for the passkey first, on the same screen,
  // then sends the approval. (Captured before htmx sees the submit.)
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!form.matches || !form.matches("form[data-passkey-stepup]")) return;
    if (form.dataset.passkeyDone === "1") return;
    const code = form.querySelector("#stepup-code");
    if (code && code.value.trim()) return;  // a code from the app instead
    if (!passkeysWork()) return;  // the server asks again, and says why
    event.preventDefault();
    event.stopImmediatePropagation();
    const status = form.querySelector("[data-passkey-status]");
    if (status) status.textContent = "";
    ceremony(form.dataset.optionsUrl, form.dataset.url, false, { step_up: true }).then(function () {
      form.dataset.passkeyDone = "1";
      form.requestSubmit();
    }).catch(function (error) {
      if (status) status.textContent = "Not approved: the passkey did not verify (" + error.message + ").";
    });
  }, true);
})();
