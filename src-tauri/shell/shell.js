// Status page of the Gatehouse app (bundled, tauri://localhost). Every text
// is set with textContent: nothing here is ever parsed as HTML.
"use strict";

const invoke = (cmd, args) => window.__TAURI_INTERNALS__.invoke(cmd, args || {});
const $ = (id) => document.getElementById(id);

function showError(err) {
  const box = $("error");
  box.textContent = err && err.message ? err.message : String(err);
  box.hidden = false;
}

function render(view) {
  $("error").hidden = true;
  $("summary").textContent = view.summary;
  const list = $("clients");
  list.replaceChildren();
  if (view.clients.length === 0) {
    const li = document.createElement("li");
    li.textContent = "No AI clients detected.";
    list.append(li);
  }
  for (const c of view.clients) {
    const li = document.createElement("li");
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = c.protected;
    box.dataset.client = c.id;
    box.id = "client-" + c.id;
    box.addEventListener("change", () => {
      invoke("set_client_protected", { client: c.id, protected: box.checked })
        .then(render)
        .catch((e) => { box.checked = !box.checked; showError(e); });
    });
    const name = document.createElement("span");
    name.textContent = c.name + " (" + c.servers + (c.servers === 1 ? " server)" : " servers)");
    label.append(box, name);
    li.append(label);
    list.append(li);
  }
  const paused = view.protection === "paused";
  $("mode").textContent = paused
    ? "Paused: wrapped servers only record (audit only). Resumes by itself in " + view.resumes_in_min + " min."
    : "Active: every verdict is enforced.";
  $("mode").className = paused ? "paused" : "";
  $("pause").hidden = paused;
  $("resume").hidden = !paused;
}

function refresh() {
  return invoke("status").then(render).catch(showError);
}

$("pause").addEventListener("click", () => invoke("pause_protection", { minutes: 60 }).then(render).catch(showError));
$("resume").addEventListener("click", () => invoke("resume_protection").then(render).catch(showError));
$("open-dashboard").addEventListener("click", () => invoke("open_dashboard", {}).catch(showError));
$("uninstall-go").addEventListener("click", () => {
  invoke("uninstall", { unprotect: $("uninstall-unprotect").checked })
    .then((r) => {
      const kept = r.still_wrapped === 0
        ? (r.launcher_removed ? "Every client is restored and the launcher is removed. " : "No client runs through Gatehouse. ")
        : r.still_wrapped + " server entries still run through the Gatehouse launcher; they keep working, unprotected, after Gatehouse is removed. ";
      const out = $("uninstall-result");
      out.textContent = kept + r.next_step;
      out.hidden = false;
      return refresh();
    })
    .catch(showError);
});
refresh();
setInterval(refresh, 5000);
