// The overview: rollouts with progress, status counts, reward and pass@n, throughput, the
// service's live state, and plots. A running service's GET /v1/events keeps it current (no
// polling); a data dir or file opened with `rollouts view` is shown as it is.

import { follow, getJSON } from "./api.js";
import { el, link, MASKED, num, statusChip } from "./dom.js";
import { lineChart, quantile } from "./plots.js";

const WINDOW = 20; // trajectories per point of the rolling plots
const state = {
  overview: null,
  stats: null,
  events: 0,
  recent: [], // finished trajectories seen live: {at, tokens, total_s, reward}
  groupBest: new Map(), // group id -> best reward seen live (pass@n)
  following: false,
};
let visible = null; // the element the overview renders into while it is shown
let pending = false;

function redraw() {
  if (!visible || pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    if (visible) visible.replaceChildren(...render());
  });
}

async function loadSnapshot() {
  state.overview = await getJSON("/ui/api/overview");
  document.getElementById("source").textContent = state.overview.source;
  redraw();
}

function rollout(id) {
  return state.overview.rollouts.find((r) => r.id === id);
}

function onEvent(kind, data) {
  state.events += 1;
  document.getElementById("live-status").textContent = `live · ${state.events} events`;
  if (kind === "stats") {
    state.stats = data;
  } else if (kind === "submitted" || !rollout(data.rollout_id)) {
    loadSnapshot(); // a rollout this page has not seen: take it from the store
    return;
  } else if (kind === "trajectory") {
    const r = rollout(data.rollout_id);
    r.samples_completed += 1;
    r.counts[data.status] = (r.counts[data.status] || 0) + 1;
    if (data.reward !== null) {
      const scored = Object.entries(r.counts).filter(([s]) => !MASKED.has(s)).reduce((a, [, n]) => a + n, 0);
      r.mean_reward = ((r.mean_reward ?? 0) * (scored - 1) + data.reward) / scored;
      const best = state.groupBest.get(data.group_id);
      state.groupBest.set(data.group_id, best === undefined ? data.reward : Math.max(best, data.reward));
      const v = state.overview.reward_by_version.find((x) => x.version === data.policy_version);
      if (v) {
        v.mean_reward = (v.mean_reward * v.n + data.reward) / (v.n + 1);
        v.n += 1;
      } else {
        state.overview.reward_by_version.push({ version: data.policy_version, mean_reward: data.reward, n: 1 });
        state.overview.reward_by_version.sort((a, b) => a.version - b.version);
      }
    }
    state.recent.push({ at: Date.now(), tokens: data.generated_tokens, total_s: data.total_s, reward: data.reward });
  } else if (kind === "group") {
    const r = rollout(data.rollout_id);
    const passedBefore = (r.pass_at_n ?? 0) * r.groups_completed;
    r.groups_completed += 1;
    const best = state.groupBest.get(data.group_id);
    r.pass_at_n = (passedBefore + (best !== undefined && best >= 1 ? 1 : 0)) / r.groups_completed;
  } else if (kind === "rollout") {
    loadSnapshot(); // it ended: take its final counts from the store
    return;
  }
  redraw();
}

export async function showOverview(container) {
  visible = container;
  if (!state.overview) await loadSnapshot();
  if (state.overview.live && !state.following) {
    state.following = true;
    follow("/v1/events", onEvent, loadSnapshot, (s) => {
      document.getElementById("live-status").textContent = s === "live" ? `live · ${state.events} events` : s;
    });
  } else if (!state.overview.live) {
    document.getElementById("live-status").textContent = "read-only";
  }
  redraw();
  return () => {
    visible = null;
  };
}

function card(label, value, attrs = {}) {
  return el("div", { class: "card", ...attrs }, el("div", { class: "card-value" }, value), el("div", { class: "muted" }, label));
}

function liveCards() {
  const s = state.stats;
  if (!state.overview.live) return [];
  const minute = Date.now() - 60000;
  const last = state.recent.filter((t) => t.at >= minute);
  const health = s
    ? Object.entries(s.health).map(([name, ok]) => el("span", { class: `chip ${ok ? "ok" : "masked"}` }, `${name} ${ok ? "up" : "down"}`))
    : "—";
  return [
    el(
      "div",
      { class: "cards", id: "live-cards" },
      card("samples in flight", s ? s.running_samples : "—", { id: "in-flight" }),
      card("samples queued", s ? s.queued_samples : "—"),
      card("concurrency", s ? s.concurrency : "—", { id: "concurrency" }),
      card("trajectories / min", last.length, { id: "throughput" }),
      card("generated tokens / min", last.reduce((a, t) => a + t.tokens, 0)),
      card("policy version", s ? s.policy_version : "—"),
      card("max staleness", s ? s.max_staleness ?? "none" : "—"),
      card("warm sandboxes", s ? num(s.warm_pool, 0) : "—"),
      card("health", health),
    ),
  ];
}

function progress(done, total) {
  const pct = total ? Math.round((100 * done) / total) : 0;
  return el("div", { class: "progress", title: `${pct}%` }, el("div", { class: "bar", style: `width:${pct}%` }), el("span", {}, `${done} / ${total}`));
}

function rolloutTable() {
  const rows = state.overview.rollouts.map((r) =>
    el(
      "tr",
      { "data-rollout": r.id },
      el("td", {}, link(`#/samples?rollout_id=${encodeURIComponent(r.id)}`, r.id)),
      el("td", { class: "rollout-status" }, r.status),
      el("td", { class: "groups" }, progress(r.groups_completed, r.groups_total)),
      el("td", { class: "samples" }, `${r.samples_completed} / ${r.samples_total}`),
      el("td", {}, num(r.mean_reward)),
      el("td", {}, num(r.pass_at_n)),
      el("td", {}, Object.entries(r.counts).map(([s, n]) => el("span", {}, statusChip(s), ` ${n} `))),
    ),
  );
  const head = ["rollout", "status", "groups done", "samples done", "mean reward", "pass@n", "statuses"];
  return el(
    "table",
    { id: "rollouts" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: head.length, class: "muted" }, "no rollouts yet"))),
  );
}

function rolling(values) {
  const out = [];
  for (let i = 0; i < values.length; i++) out.push(values.slice(Math.max(0, i - WINDOW + 1), i + 1));
  return out;
}

function charts() {
  const byVersion = state.overview.reward_by_version.map((v) => [v.version, v.mean_reward]);
  const out = [lineChart("mean reward by policy version", [{ name: "mean reward", cls: "s1", points: byVersion }], { xLabel: "policy version" })];
  if (state.overview.live) {
    const lat = rolling(state.recent.map((t) => t.total_s)).map((w) => w.slice().sort((a, b) => a - b));
    const pts = (q) => lat.map((w, i) => [i + 1, quantile(w, q)]);
    out.push(
      lineChart(
        `trial latency (s), last ${WINDOW}`,
        [
          { name: "p50", cls: "s1", points: pts(0.5) },
          { name: "p90", cls: "s2", points: pts(0.9) },
          { name: "p99", cls: "s3", points: pts(0.99) },
        ],
        { xLabel: "trajectories since the page opened" },
      ),
    );
    const rewards = rolling(state.recent.map((t) => t.reward).filter((r) => r !== null));
    const mean = rewards.map((w, i) => [i + 1, w.reduce((a, b) => a + b, 0) / w.length]);
    out.push(lineChart(`mean reward, last ${WINDOW}`, [{ name: "reward", cls: "s2", points: mean }], { xLabel: "scored trajectories since the page opened" }));
  }
  return el("div", { class: "charts" }, out);
}

// Tasks whose own oracle the grader does not score 1 unflagged: their samples are graded in the
// fallback (flagged unguarded) or dropped, so the page names them above everything else.
function uncalibratedTable() {
  const tasks = state.overview.uncalibrated || [];
  if (!tasks.length) return [];
  const rows = tasks.map((t) =>
    el(
      "tr",
      { "data-task": t.task_id },
      el("td", {}, link(`#/samples?task_id=${encodeURIComponent(t.task_id)}`, t.task_id)),
      el("td", { title: t.output }, t.why),
      el("td", { class: "muted" }, t.setting),
    ),
  );
  return [
    el("h2", {}, "Uncalibrated tasks"),
    el("p", { class: "muted" }, "Their oracle does not score 1 unflagged through the grader: samples are graded in the fallback, flagged unguarded, or dropped."),
    el(
      "table",
      { id: "uncalibrated" },
      el("thead", {}, el("tr", {}, ["task", "oracle", "setting"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows),
    ),
  ];
}

function render() {
  return [...liveCards(), ...uncalibratedTable(), el("h2", {}, "Rollouts"), rolloutTable(), charts()];
}
