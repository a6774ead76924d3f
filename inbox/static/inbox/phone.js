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
      return registration.pushManager.getSubscription().then(function (existing) { show(!!existing); });
    });
    if (Notification.permission === "denied") say("Notifications are blocked for this site in the browser's settings.");

    on.addEventListener("click", function () {
      on.disabled = true;
      say("");
      Notification.requestPermission().then(function (permission) {
        if (permission !== "granted") throw new Error("notifications were not allowed");
        return Promise.all([
          navigator.serviceWorker.ready,
          fetch(control.dataset.keyUrl, { credentials: "same-origin" }).then(function (r) { return r.json(); }),
        ]);
      }).then(function (both) {
        return both[0].pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(both[1].publicKey) });
      }).then(function (subscription) {
        return send(control.dataset.subscriptionsUrl, "POST", subscription.toJSON());
      }).then(function () {
        show(true);
        say("Notifications are on for this device.");
      }).catch(function (error) {
        show(false);
        say("Notifications are off: " + error.message);
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
})();
