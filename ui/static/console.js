// The console's only script of its own (htmx aside). Every time the server
// writes is in UTC, in a <time datetime> element; here each is shown in the
// reader's time zone: "3 minutes ago" within a week, else the local date
// and time, with the exact local time and zone on hover. Without
// JavaScript the UTC text stays.
(function () {
  "use strict";
  const rel = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  const zone = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" });
  const pad = (n) => String(n).padStart(2, "0");
  function exact(d) {
    const z = zone.formatToParts(d).find((p) => p.type === "timeZoneName");
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + (z ? " " + z.value : "");
  }
  // Under 45 s is "now", under an hour minutes, then hours, then days; a
  // week or more away is a date.
  const steps = [[3600, 60, "minute"], [86400, 3600, "hour"], [604800, 86400, "day"]];
  function relative(d) {
    const s = (d.getTime() - Date.now()) / 1000;
    if (Math.abs(s) < 45) return rel.format(0, "second");
    for (const [below, unit, name] of steps) {
      if (Math.abs(s) < below) return rel.format(Math.round(s / unit) || Math.sign(s), name);
    }
    return exact(d);
  }
  // A time marked data-exact (a restore's) is shown to the second with
  // its zone, never as "3 minutes ago".
  function exactSeconds(d) {
    const z = zone.formatToParts(d).find((p) => p.type === "timeZoneName");
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + (z ? " " + z.value : "");
  }
  function localize(root) {
    const times = [...root.querySelectorAll("time[datetime]")];
    if (root.matches && root.matches("time[datetime]")) times.push(root);
    for (const t of times) {
      if (t.dataset.utc) continue;
      const d = new Date(t.dateTime);
      if (isNaN(d.getTime())) continue;
      t.dataset.utc = t.textContent;
      t.title = exact(d) + " (" + t.textContent + ")";
      t.textContent = "exact" in t.dataset ? exactSeconds(d) : relative(d);
    }
  }

  // A time to type (input data-local-time, a restore's) is the reader's
  // local time: the label names their zone, and at submit the value goes
  // with that zone's offset on the chosen date ("2026-01-31T18:00:00+13:00")
  // in a hidden field of the input's name. The server reads a value
  // without an offset as UTC, which the label says without JavaScript.
  const local = (d) => d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" +
    pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  function offset(d) {
    const m = -d.getTimezoneOffset(), a = Math.abs(m);
    return (m < 0 ? "-" : "+") + pad(Math.floor(a / 60)) + ":" + pad(a % 60);
  }
  function zoneName(d) {
    const z = zone.formatToParts(d).find((p) => p.type === "timeZoneName");
    const id = Intl.DateTimeFormat().resolvedOptions().timeZone;
    return [...new Set([id, z && z.value].filter(Boolean))].join(", ");
  }
  function localInputs(root) {
    for (const input of root.querySelectorAll("input[data-local-time]")) {
      if (input.dataset.zoneSent) continue;
      const sent = document.createElement("input");
      sent.type = "hidden";
      sent.name = input.name;
      input.removeAttribute("name");
      input.dataset.zoneSent = sent.name;
      input.after(sent);
      const label = input.labels[0] && input.labels[0].querySelector("[data-zone]");
      if (label) label.textContent = "(your time: " + zoneName(new Date()) + ")";
      if (!input.value) input.value = local(new Date()).slice(0, 16);
    }
  }
  document.addEventListener("submit", (e) => {
    for (const input of e.target.querySelectorAll("input[data-local-time]")) {
      const sent = input.nextElementSibling;
      const d = new Date(input.value); // a date and time without a zone is local
      if (sent && sent.name === input.dataset.zoneSent) sent.value = isNaN(d.getTime()) ? input.value : local(d) + offset(d);
    }
  }, true); // before htmx reads the form
  const load = (root) => { localize(root); localInputs(root); };
  document.addEventListener("DOMContentLoaded", () => load(document));
  document.addEventListener("htmx:load", (e) => load(e.target));
})();

// Copy buttons (hidden without JavaScript): copy the text of the element
// named by data-copy, or, where the clipboard is refused (plain HTTP from
// another machine is not a secure context), select it for the reader.
(function () {
  "use strict";
  function show(root) {
    for (const b of root.querySelectorAll("button.copy[data-copy]")) b.hidden = false;
  }
  document.addEventListener("DOMContentLoaded", () => show(document));
  document.addEventListener("htmx:load", (e) => show(e.target));
  document.addEventListener("click", (e) => {
    const b = e.target.closest("button.copy[data-copy]");
    const el = b && document.getElementById(b.dataset.copy);
    if (!el) return;
    const select = () => {
      const r = document.createRange();
      r.selectNodeContents(el);
      getSelection().removeAllRanges();
      getSelection().addRange(r);
      b.textContent = "Selected: press Ctrl+C (or Copy)";
    };
    if (!navigator.clipboard) return select();
    navigator.clipboard.writeText(el.textContent.trim()).then(() => { b.textContent = "Copied"; }, select);
  });
})();

// An upload's progress (Import): how much of the file has gone, then what
// the server is doing with it. htmx reports the upload's progress, then
// the answer's, on the form: the first is the upload's until it is whole.
(function () {
  "use strict";
  const size = (n) => n >= 1 << 30 ? (n / (1 << 30)).toFixed(1) + " GiB" :
    n >= 1 << 20 ? (n / (1 << 20)).toFixed(1) + " MiB" : Math.ceil(n / 1024) + " KiB";
  document.addEventListener("htmx:beforeRequest", (e) => {
    const out = e.target.querySelector && e.target.querySelector("[data-upload-progress]");
    if (!out) return;
    out.dataset.first = out.dataset.first || out.textContent;
    out.textContent = out.dataset.first;
    delete out.dataset.whole;
  });
  document.addEventListener("htmx:xhr:progress", (e) => {
    const out = e.target.querySelector && e.target.querySelector("[data-upload-progress]");
    if (!out || out.dataset.whole || !e.detail.lengthComputable || !e.detail.total) return;
    const { loaded, total } = e.detail;
    if (loaded >= total) {
      out.dataset.whole = "1";
      out.textContent = out.dataset.sent;
      return;
    }
    out.textContent = "Sending the export: " + size(loaded) + " of " + size(total) + " (" + Math.floor(100 * loaded / total) + "%).";
  });
})();

// How far a long action is (a restore of a person, its undo): while the
// form (data-progress, a URL) waits for its answer, the sentence the URL
// answers replaces the form's status text (data-progress-out) every 250 ms.
// Without JavaScript the form posts and the next page says what was done.
(function () {
  "use strict";
  document.addEventListener("htmx:beforeRequest", (e) => {
    const form = e.target.closest && e.target.closest("form[data-progress]");
    const out = form && form.querySelector("[data-progress-out]");
    if (!out || form.dataset.polling) return;
    form.dataset.polling = "1";
    const ask = () => {
      if (!form.dataset.polling || !form.isConnected) return; // answered, or its page replaced
      fetch(form.dataset.progress, { credentials: "same-origin", cache: "no-store" })
        .then((r) => (r.status === 200 ? r.text() : null))
        .then((t) => { if (t && form.dataset.polling) out.textContent = t; })
        .catch(() => {})
        .finally(() => { if (form.dataset.polling) setTimeout(ask, 250); });
    };
    setTimeout(ask, 100); // the first soon: an undo can be done within half a second
  });
  document.addEventListener("htmx:afterRequest", (e) => {
    const form = e.target.closest && e.target.closest("form[data-progress]");
    if (form) delete form.dataset.polling;
  });
})();
