// The page's router: #/overview, #/samples?filters, #/group/ID, #/sample/ID.

import { forgetKey, getJSON } from "./api.js";
import { showGroup, showSamples } from "./browser.js";
import { showOverview } from "./overview.js";
import { showSample } from "./sample.js";

let leave = null;

async function route() {
  const view = document.getElementById("view");
  const error = document.getElementById("error");
  const [path, search] = (location.hash.slice(1) || "/overview").split("?");
  const params = new URLSearchParams(search || "");
  if (leave) leave();
  leave = null;
  error.hidden = true;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", path.startsWith(a.getAttribute("href").slice(1)));
  try {
    if (path === "/overview") {
      leave = await showOverview(view);
    } else if (path === "/samples") {
      // The filter's choices (rollouts, tasks) as they are now.
      const overview = await getJSON("/ui/api/overview");
      document.getElementById("source").textContent = overview.source;
      await showSamples(view, params, overview);
    } else if (path.startsWith("/group/")) {
      await showGroup(view, decodeURIComponent(path.slice(7)));
    } else if (path.startsWith("/sample/")) {
      await showSample(view, decodeURIComponent(path.slice(8)));
    } else {
      location.hash = "#/overview";
    }
  } catch (e) {
    error.textContent = String(e.message || e);
    error.hidden = false;
  }
}

document.getElementById("forget-key").addEventListener("click", () => {
  forgetKey();
  location.reload();
});
if (sessionStorage.getItem("rollouts.apiKey")) document.getElementById("forget-key").hidden = false;
window.addEventListener("hashchange", route);
route();
