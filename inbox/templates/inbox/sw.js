{% autoescape off %}/* Impri's service worker, scope /inbox/ (served by inbox.pwa). */
"use strict";
const VERSION = {{ version_json }};
const PRECACHE = {{ precache_json }};
const OFFLINE = {{ offline_json }};
const SCOPE = {{ scope_json }};
const ICON = {{ icon_json }};

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches.open(VERSION).then((cache) => cache.addAll(PRECACHE)).then(() => self.skipWaiting())
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches.keys()
      .then((keys) => Promise.all(keys.filter((k) => k.startsWith("impri-") && k !== VERSION).map((k) => caches.delete(k))))
      .then(() => self.clients.claim())
  );
});

// Reviewer pages are never cached (they carry decisions): the network, else the offline page.
self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET") return;
  if (request.mode === "navigate") {
    event.respondWith(fetch(request).catch(() => caches.match(OFFLINE)));
    return;
  }
  const url = new URL(request.url);
  if (url.origin === self.location.origin && PRECACHE.includes(url.pathname)) {
    event.respondWith(fetch(request).catch(() => caches.match(request)));
  }
});

// Only a page of this inbox (on this origin) opens from a notification, whatever a payload says.
function sameOriginPath(raw) {
  try {
    // The path of an inbox page, opened on this origin whatever host the server wrote into it.
    const url = new URL(raw, self.location.origin);
    if (url.pathname.startsWith(SCOPE)) return new URL(url.pathname + url.search, self.location.origin).href;
  } catch (e) { /* fall through */ }
  return new URL(SCOPE, self.location.origin).href;
}

self.addEventListener("push", (event) => {
  let data = {};
  try { data = event.data ? event.data.json() : {}; } catch (e) { data = {}; }
  const title = data.kind === "ledger.exception"
    ? [data.headline || "Reconciliation exception", data.amount].filter(Boolean).join(": ")
    : data.amount ? `${data.amount} waiting for you` : "An action is waiting for you";
  const body = [data.what || "", data.title || ""].filter(Boolean).join("\n");
  event.waitUntil(self.registration.showNotification(title, {
    body: body,
    tag: data.action_id || data.topic || "impri",
    renotify: true,
    icon: ICON,
    badge: ICON,
    data: { url: sameOriginPath(data.url || SCOPE) },
  }));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const target = sameOriginPath((event.notification.data || {}).url || SCOPE);
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((windows) => {
      for (const w of windows) {
        if (w.url === target && "focus" in w) return w.focus();
      }
      return self.clients.openWindow(target);
    })
  );
});
{% endautoescape %}
