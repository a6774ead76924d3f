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
})();
