// The trajectory browser: a filtered, paged list of finished samples (nothing but the
// samples' summary columns is read for it) and a group's n samples side by side.

import { getJSON } from "./api.js";
import { el, link, MASKED, num, statusChip } from "./dom.js";

const FILTERS = ["rollout_id", "task_id", "status", "reward_min", "reward_max"];
const STATUSES = ["ok", "agent_timeout", "context_length", "verifier_timeout", ...MASKED];
const PAGE = 50;

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) q.set(k, v);
  return q.toString();
}

function filterForm(params, overview) {
  const input = (name, attrs) => el("input", { name, id: `filter-${name}`, value: params.get(name) ?? "", ...attrs });
  const rollouts = el(
    "select",
    { name: "rollout_id", id: "filter-rollout_id" },
    el("option", { value: "" }, "any rollout"),
    overview.rollouts.map((r) => el("option", { value: r.id, selected: params.get("rollout_id") === r.id }, r.id)),
  );
  const statuses = el(
    "select",
    { name: "status", id: "filter-status" },
    el("option", { value: "" }, "any status"),
    STATUSES.map((s) => el("option", { value: s, selected: params.get("status") === s }, s)),
  );
  const tasks = el("datalist", { id: "task-ids" }, overview.tasks.map((t) => el("option", { value: t })));
  const form = el(
    "form",
    { id: "filters", class: "filters" },
    el("label", {}, "rollout ", rollouts),
    el("label", {}, "task ", input("task_id", { list: "task-ids", placeholder: "any task" }), tasks),
    el("label", {}, "status ", statuses),
    el("label", {}, "reward ≥ ", input("reward_min", { type: "number", step: "any", size: 5 })),
    el("label", {}, "reward ≤ ", input("reward_max", { type: "number", step: "any", size: 5 })),
    el("button", { type: "submit", id: "apply-filters" }, "Filter"),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const values = Object.fromEntries(FILTERS.map((name) => [name, form.elements[name].value.trim()]));
    location.hash = `#/samples?${query(values)}`;
  });
  return form;
}

function sampleTable(rows, withGroup = true) {
  const head = ["sample", "task", ...(withGroup ? ["group"] : []), "status", "reward", "advantage", "version", "tokens"];
  return el(
    "table",
    { class: "samples" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el(
      "tbody",
      {},
      rows.map((r) =>
        el(
          "tr",
          { "data-trajectory": r.trajectory_id, "data-status": r.status, "data-reward": r.reward ?? "" },
          el("td", {}, link(`#/sample/${encodeURIComponent(r.trajectory_id)}`, r.trajectory_id, { class: "open-sample" })),
          el("td", {}, r.task_id),
          withGroup ? el("td", {}, link(`#/group/${encodeURIComponent(r.group_id)}`, `group of ${r.task_id}`, { class: "open-group" })) : null,
          el("td", {}, statusChip(r.status)),
          el("td", { class: "reward" }, num(r.reward)),
          el("td", {}, num(r.advantage)),
          el("td", {}, num(r.policy_version)),
          el("td", {}, num(r.tokens)),
        ),
      ),
    ),
  );
}

export async function showSamples(container, params, overview) {
  const offset = Number(params.get("offset") || 0);
  const filter = Object.fromEntries(FILTERS.map((k) => [k, params.get(k)]));
  const page = await getJSON(`/ui/api/samples?${query({ ...filter, offset, limit: PAGE })}`);
  const to = (o) => `#/samples?${query({ ...filter, offset: o })}`;
  const nav = el(
    "div",
    { class: "pager" },
    offset > 0 ? link(to(Math.max(0, offset - PAGE)), "‹ previous") : null,
    el("span", { id: "page-info" }, page.total ? ` ${offset + 1}–${offset + page.rows.length} of ${page.total} ` : " no samples match "),
    offset + PAGE < page.total ? link(to(offset + PAGE), "next ›", { id: "next-page" }) : null,
  );
  const table = sampleTable(page.rows);
  table.dataset.query = query(filter); // what this table shows (tests wait for it)
  container.replaceChildren(el("h2", {}, "Trajectories"), filterForm(params, overview), nav, table);
}

export async function showGroup(container, groupId) {
  const page = await getJSON(`/ui/api/samples?${query({ group_id: groupId, limit: 500 })}`);
  if (!page.rows.length) throw new Error(`no finished samples in group ${groupId}`);
  const first = page.rows[0];
  const cards = page.rows.map((r) =>
    el(
      "a",
      { class: `sample-card ${r.reward > 0 ? "pass" : ""}`, href: `#/sample/${encodeURIComponent(r.trajectory_id)}`, "data-trajectory": r.trajectory_id },
      el("div", { class: "card-value" }, `#${r.sample_index}`),
      statusChip(r.status),
      el("div", {}, "reward ", el("b", {}, num(r.reward))),
      el("div", {}, "advantage ", el("b", {}, num(r.advantage))),
      el("div", { class: "muted" }, `policy v${num(r.policy_version)}`, r.tokens === null ? "" : ` · ${r.tokens} tokens`),
    ),
  );
  container.replaceChildren(
    el("h2", {}, `Group ${groupId}`),
    el("p", {}, "task ", el("b", {}, first.task_id), " · rollout ", link(`#/samples?rollout_id=${encodeURIComponent(first.rollout_id)}`, first.rollout_id), ` · ${page.total} samples`),
    el("div", { class: "group", id: "group-samples" }, cards),
  );
}
