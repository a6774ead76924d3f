/* Impri inbox: live updates, clocks, keyboard. A static file, so the page's
 * Content-Security-Policy can forbid every inline script.
 *
 * Nothing here builds HTML from strings: server fragments arrive through htmx
 * (escaped by Django), and everything else is set with textContent. */
(function () {
  "use strict";

  const body = document.body;
  const me = body.dataset.username || "";

  // --- Clocks ---------------------------------------------------------------------------

  function span(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) return seconds + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min" + (minutes < 10 && seconds % 60 ? " " + (seconds % 60) + " s" : "");
    const hours = Math.floor(minutes / 60);
    if (hours < 48) return hours + " h" + (minutes % 60 ? " " + (minutes % 60) + " min" : "");
    return Math.floor(hours / 24) + " d";
  }

  function when(el) {
    const t = Date.parse(el.getAttribute("datetime"));
    return Number.isNaN(t) ? null : t;
  }

  function tick() {
    const now = Date.now();
    document.querySelectorAll("time.ago").forEach(function (el) {
      const t = when(el);
      if (t !== null) el.textContent = span((now - t) / 1000) + " ago";
    });
    document.querySelectorAll("time.countdown").forEach(function (el) {
      const t = when(el);
      if (t === null) return;
      const left = (t - now) / 1000;
      el.textContent = left > 0 ? "expires in " + span(left) : "expired";
      el.classList.toggle("soon", left > 0 && left < 300);
      if (left <= 0 && !el.dataset.done) {
        el.dataset.done = "1";
        expiredLocally(el);
      }
    });
    // An "I'm on it" runs out after its time: it goes from rows and the page without a message.
    document.querySelectorAll("[data-claim-until]").forEach(function (el) {
      const t = Date.parse(el.dataset.claimUntil);
      if (Number.isNaN(t) || t > now) return;
      const onPage = el.closest("#reviews");
      el.remove();
      if (onPage) htmx.trigger(body, "inbox:reviewed");
    });
  }

  function expiredLocally(el) {
    const row = el.closest("li.row");
    if (row) return removeRow(row);
    const page = el.closest("#action");
    if (page) settle(page, { status: "expired", decided_by: null, decided_at: el.getAttribute("datetime") });
  }

  // --- The live socket ------------------------------------------------------------------

  const live = document.getElementById("live");
  let attempts = 0;
  let wasOpen = false;

  function setLive(state, text) {
    if (!live) return;
    live.dataset.state = state;
    live.querySelector(".live-text").textContent = text;
  }

  function connect() {
    const path = body.dataset.liveUrl;
    if (!path || !("WebSocket" in window)) return;
    const socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + path);
    socket.addEventListener("open", function () {
      // The action page says which action it shows: when this socket goes, so does our claim on it.
      const page = document.getElementById("action");
      if (page) socket.send(JSON.stringify({ event: "watch", action_id: page.dataset.actionId }));
    });
    socket.addEventListener("message", function (event) {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (e) {
        return;
      }
      if (message.event === "hello") {
        setLive("on", "Live");
        if (wasOpen) {
          htmx.trigger(body, "inbox:resync"); // we may have missed changes
          if (claimedByMe()) sendClaim(false); // the old socket's close released it
        }
        wasOpen = true;
        attempts = 0;
      } else if (message.action_id) {
        onUpdate(message);
      }
    });
    socket.addEventListener("close", function () {
      setLive("off", "Reconnecting…");
      attempts = Math.min(attempts + 1, 6);
      window.setTimeout(connect, 500 * Math.pow(2, attempts));
    });
  }

  function onUpdate(message) {
    const page = document.getElementById("action");
    if (page && page.dataset.actionId === message.action_id) {
      if (message.status === "pending") htmx.trigger(body, "inbox:reviewed");
      else if (message.event === "result.reported" && page.dataset.status !== "pending") {
        htmx.ajax("GET", location.pathname, { target: "#action", swap: "outerHTML" }); // show the result
      } else settle(page, message);
    }
    if (document.getElementById("rows") && currentPage() === "queue") onQueueUpdate(message);
  }

  function currentPage() {
    const el = document.querySelector("[data-page]");
    return el ? el.dataset.page : "";
  }

  // --- Queue ------------------------------------------------------------------------------

  function onQueueUpdate(message) {
    const row = document.getElementById("row-" + message.action_id);
    if (message.status !== "pending") {
      if (row) removeRow(row);
      return;
    }
    if (row) {
      htmx.ajax("GET", rowUrl(message.action_id), { target: row, swap: "outerHTML" });
      if (message.event === "action.escalated") changed();
      return;
    }
    if (message.event === "action.claimed" || message.event === "action.released") return;
    // The counters follow every arrival, shown here or not (another page, another filter).
    if (new URLSearchParams(location.search).has("after")) return changed(); // new rows go on the first page
    const place = placeFor(message);
    if (!place) return changed();
    htmx.ajax("GET", rowUrl(message.action_id), place).then(changed, changed);
  }

  function rowUrl(id) {
    const params = new URLSearchParams(location.search);
    params.delete("after");
    params.set("only", id);
    return location.pathname + "?" + params.toString();
  }

  // Where a new row goes among the loaded ones, or null when it belongs to a page not loaded yet.
  function placeFor(message) {
    const list = document.getElementById("rows");
    const urgent = document.querySelector("[data-sort]").dataset.sort === "urgent";
    const key = urgent ? "expiresAt" : "createdAt";
    const value = Date.parse(urgent ? message.expires_at : message.created_at);
    const rows = list.querySelectorAll("li.row");
    for (let i = 0; i < rows.length; i++) {
      const other = Date.parse(rows[i].dataset[key]);
      const before = urgent
        ? value < other || (value === other && message.action_id < rows[i].dataset.actionId)
        : value > other || (value === other && message.action_id > rows[i].dataset.actionId);
      if (before) return { target: rows[i], swap: "beforebegin" };
    }
    if (list.dataset.hasMore === "1") return null;
    return { target: list, swap: "beforeend" };
  }

  function removeRow(row) {
    if (row.dataset.leaving) return;
    row.dataset.leaving = "1";
    const focused = row.contains(document.activeElement);
    const neighbour = nextRow(row, 1) || nextRow(row, -1);
    row.remove();
    if (focused && neighbour) focusRow(neighbour);
    changed();
  }

  function changed() {
    htmx.trigger(body, "inbox:changed");
  }

  function nextRow(row, step) {
    let el = step > 0 ? row.nextElementSibling : row.previousElementSibling;
    while (el && !el.classList.contains("row")) el = step > 0 ? el.nextElementSibling : el.previousElementSibling;
    return el;
  }

  function focusRow(row) {
    document.querySelectorAll("li.row.selected").forEach(function (r) {
      r.classList.remove("selected");
    });
    row.classList.add("selected");
    const link = row.querySelector("a.row-link");
    if (link) link.focus();
    row.scrollIntoView({ block: "nearest" });
  }

  function moveInQueue(step) {
    const rows = Array.from(document.querySelectorAll("#rows li.row"));
    if (!rows.length) return;
    const current = document.querySelector("#rows li.row.selected");
    let index = current ? rows.indexOf(current) + step : 0;
    index = Math.max(0, Math.min(rows.length - 1, index));
    focusRow(rows[index]);
  }

  // --- Action page ------------------------------------------------------------------------

  // Someone (or the clock) settled the action this page shows: say who and when, lock the forms.
  function settle(page, message) {
    if (page.dataset.status !== "pending") return;
    page.dataset.status = message.status;
    page.querySelectorAll("#decision fieldset").forEach(function (fieldset) {
      fieldset.disabled = true;
    });
    page.querySelectorAll(".countdown-big").forEach(function (el) {
      el.remove();
    });
    const pill = page.querySelector(".status-line .pill");
    if (pill) {
      pill.textContent = message.status;
      pill.className = "pill pill-" + message.status;
    }
    const banner = document.getElementById("live-banner");
    banner.replaceChildren();
    const verb = document.createElement("strong");
    verb.className = "settled-verb";
    const said = message.status.replace(/_/g, " ");
    verb.textContent = said.charAt(0).toUpperCase() + said.slice(1);
    banner.append(verb);
    const by = message.decided_by;
    if (by && by.name) {
      banner.append(" by ");
      const who = document.createElement("strong");
      who.textContent = by.type === "reviewer" && by.name === me ? "you" : by.name;
      banner.append(who);
    }
    if (message.decided_at) {
      const time = document.createElement("time");
      time.className = "ago";
      time.setAttribute("datetime", message.decided_at);
      banner.append(" ", time);
    }
    const locked = document.createElement("span");
    locked.className = "locked";
    locked.textContent = " · the form is locked: this action can no longer be decided.";
    banner.append(locked);
    banner.hidden = false;
    tick();
  }

  function armApprove() {
    const button = document.querySelector("#decision .approve");
    if (!button || button.closest("fieldset").disabled) return;
    if (button.classList.contains("armed")) {
      button.form.requestSubmit(button);
      return;
    }
    button.classList.add("armed");
    button.focus();
    const hint = button.parentElement.querySelector(".confirm-hint");
    if (hint) hint.hidden = false;
  }

  function disarm() {
    document.querySelectorAll(".approve.armed").forEach(function (button) {
      button.classList.remove("armed");
      const hint = button.parentElement.querySelector(".confirm-hint");
      if (hint) hint.hidden = true;
    });
  }

  function focusField(selector) {
    const field = document.querySelector(selector);
    if (!field || field.disabled) return;
    field.focus();
    if (field.select) field.select();
  }

  function follow(selector) {
    const link = document.querySelector(selector);
    if (link) window.location.assign(link.href);
  }

  // An amount typed in major units ("50.00", as the reviewer thinks of it) in minor units (5000),
  // exactly (no floating point), or null when it is not an amount with at most `exponent` decimals.
  function majorToMinor(text, exponent) {
    const plain = text.replace(/[\s,$€£¥₹₩]/g, "");
    const match = /^(-?)([0-9]+)(?:\.([0-9]+))?$/.exec(plain);
    if (!match) return null;
    const fraction = (match[3] || "").replace(/0+$/, "");
    if (fraction.length > exponent) return null;
    const digits = match[2] + fraction.padEnd(exponent, "0");
    const minor = Number(match[1] + digits);
    return Number.isSafeInteger(minor) ? minor : null;
  }

  // Amounts get a live "= $50.00 USD" beside the input, restated on the Approve button
  // ("Approve $50.00 USD") and in "What will happen" when the input is the payload's amount;
  // an amount typed in major units also shows the value the payload will hold (5000).
  function showMoney(input) {
    const output = document.querySelector('output[data-money-for="' + CSS.escape(input.id) + '"]');
    // The server renders the output only beside an amount the action declares (or Impri detects).
    if (!output || !output.dataset.currency) return;
    const button = document.querySelector('.approve-amount[data-money-for="' + CSS.escape(input.id) + '"]');
    // "What will happen" states the payload's amount: the one the Approve button restates.
    const happen = button ? document.querySelector(".will-happen .outcome > .money") : null;
    const minorOut = document.querySelector('output[data-minor-for="' + CSS.escape(input.id) + '"]');
    const major = input.dataset.majorUnits !== undefined;
    const minor = major
      ? majorToMinor(input.value, Number(input.dataset.majorUnits))
      : (/^-?[0-9]+$/.test(input.value.trim()) ? Number(input.value) : null);
    if (input.value.trim() === "" || minor === null || !Number.isSafeInteger(minor)) {
      output.textContent = "";
      if (minorOut) minorOut.textContent = "";
      const hint = major ? "(enter an amount like 50.00)" : "(enter a whole number of minor units)";
      if (button) button.textContent = hint;
      if (happen) happen.textContent = hint;
      return;
    }
    if (minorOut) minorOut.textContent = minorOut.dataset.path + " = " + minor;
    const exponent = Number(output.dataset.exponent || 2);
    const currency = output.dataset.currency;
    let text;
    try {
      text = new Intl.NumberFormat("en-US", { style: "currency", currency: currency }).format(
        minor / Math.pow(10, exponent)
      );
    } catch (e) {
      text = (minor / Math.pow(10, exponent)).toFixed(exponent);
    }
    output.textContent = "= " + text + " " + currency;
    if (button) button.textContent = text + " " + currency;
    if (happen) happen.textContent = text + " " + currency;
  }

  // --- "I'm on it" ------------------------------------------------------------------------

  function claimedByMe() {
    const claim = document.getElementById("claim");
    return !!claim && claim.dataset.claimedByMe === "1";
  }

  // Claim again (release=false) or let go; a page being left uses a beacon nobody waits for.
  function sendClaim(release) {
    const claim = document.getElementById("claim");
    const form = claim && claim.querySelector("form");
    if (!form) return;
    const data = new FormData();
    data.append("csrfmiddlewaretoken", form.querySelector("[name=csrfmiddlewaretoken]").value);
    if (release) {
      data.append("release", "1");
      data.append("beacon", "1");
      navigator.sendBeacon(form.action, data);
    } else {
      fetch(form.action, { method: "POST", body: data, headers: { "HX-Request": "true" } }).then(function () {
        htmx.trigger(body, "inbox:reviewed");
      });
    }
  }

  window.addEventListener("pagehide", function () {
    if (claimedByMe()) sendClaim(true);
  });

  // --- Keyboard ---------------------------------------------------------------------------

  function typingIn(target) {
    return target.closest && target.closest("input, textarea, select, [contenteditable]");
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || document.querySelector("dialog[open]")) return; // the dialog has its own keys
    const field = typingIn(event.target);
    if (field) {
      if (event.key === "Escape") field.blur();
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && field.form && field.form.matches("form.decide")) {
        event.preventDefault();
        field.form.requestSubmit(field.form.querySelector("button[type=submit]"));
      }
      return;
    }
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    const onAction = !!document.getElementById("action");
    const keys = {
      "?": function () {
        const dialog = document.getElementById("keys");
        if (dialog && !dialog.open) dialog.showModal();
      },
      j: function () {
        onAction ? follow("[data-key-next]") : moveInQueue(1);
      },
      k: function () {
        onAction ? follow("[data-key-prev]") : moveInQueue(-1);
      },
      a: armApprove,
      r: function () {
        focusField("#decision .decide-reject textarea");
      },
      e: function () {
        focusField("#decision .edit-field input:not([type=hidden]), #decision .edit-field select");
      },
      u: function () {
        if (onAction) follow("[data-key-up]");
      },
      "/": function () {
        focusField("[data-search]");
      },
      Escape: disarm,
    };
    if (event.key !== "a" && event.key !== "Enter") disarm();
    if (keys[event.key]) {
      event.preventDefault();
      keys[event.key]();
    }
  });

  document.addEventListener("focusout", function (event) {
    if (event.target.classList && event.target.classList.contains("armed")) disarm();
  });

  document.addEventListener("click", function (event) {
    const opener = event.target.closest("[data-keys-open]");
    if (opener) document.getElementById("keys").showModal();
  });

  document.addEventListener("input", function (event) {
    if (event.target.closest(".edit-field")) showMoney(event.target);
  });

  // --- After htmx swaps ---------------------------------------------------------------

  body.addEventListener("htmx:afterSettle", function (event) {
    tick();
    const pending = document.querySelector("#queue-counts [data-count=pending]");
    if (pending && currentPage() === "queue") {
      const n = Number(pending.textContent);
      document.title = (n ? "(" + n + ") " : "") + document.title.replace(/^\(\d+\) /, "");
    }
    document.querySelectorAll(".edit-field input").forEach(showMoney);
    if (event.detail.target && event.detail.target.id === "action") {
      const error = document.querySelector("#action .has-error input, #action .has-error select");
      const next = document.querySelector("#action .next-link");
      if (error) error.focus();
      else if (next && !document.querySelector("#action #decision fieldset:not([disabled])")) next.focus();
    }
  });

  body.addEventListener("htmx:responseError", function (event) {
    const status = event.detail.xhr ? event.detail.xhr.status : "?";
    flash("The server answered " + status + ". Reload the page to see the current state.");
  });

  body.addEventListener("htmx:sendError", function () {
    flash("Could not reach Impri. Check the connection and try again.");
  });

  function flash(text) {
    let box = document.getElementById("flash");
    if (!box) {
      box = document.createElement("div");
      box.id = "flash";
      box.className = "alert alert-error flash";
      box.setAttribute("role", "alert");
      document.getElementById("main").prepend(box);
    }
    box.textContent = text;
  }

  document.querySelectorAll(".edit-field input").forEach(showMoney);
  // The queue's other filters are folded on a phone; a wider screen has room to show them.
  if (window.matchMedia("(min-width: 761px)").matches) {
    document.querySelectorAll("details[data-filter-more]").forEach(function (el) { el.open = true; });
  }
  // Charts by day open on today (their right end) when a phone scrolls them inside their card.
  document.querySelectorAll("[data-scroll-end]").forEach(function (el) { el.scrollLeft = el.scrollWidth; });
  tick();
  window.setInterval(tick, 1000);
  connect();
})();
