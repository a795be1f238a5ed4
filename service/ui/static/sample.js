// One sample: the conversation turn by turn (harness messages, the commands typed, terminal
// output), the verifier's stdout and files, reward flags, the grading history (the first
// grading at collection, one more per regrade), timings; or, toggled, its tokens: each one's
// text (POST /ui/api/tokens: the tokenizer files or the policy server; ids where there is
// neither), generated ones (loss mask 1) highlighted against prompt and observation tokens and
// coloured by the policy version of the weights that produced them, with each token's id,
// position, sampler logprob and version on hover.

import { getJSON, postJSON } from "./api.js";
import { el, link, num, statusChip } from "./dom.js";

const SHOWN = 800; // tokens drawn per segment before "show all"
const MAX_TOKEN_IDS = 4096; // ids per POST /ui/api/tokens (service/ui/models.py)

// The commands of a JSON-protocol reply (default and terminus-2 JSON harnesses); null when
// the reply is not one.
function commandsOf(text) {
  const start = text.indexOf("{");
  const end = text.lastIndexOf("}");
  if (start < 0 || end <= start) return null;
  try {
    const reply = JSON.parse(text.slice(start, end + 1));
    return Array.isArray(reply.commands) ? reply : null;
  } catch {
    return null;
  }
}

function message(m, turn) {
  if (m.role === "assistant") {
    const reply = commandsOf(m.content);
    return el(
      "div",
      { class: "msg assistant" },
      el("div", { class: "role" }, `policy · turn ${turn}`),
      reply
        ? el(
            "div",
            { class: "commands" },
            reply.commands.map((c) => el("pre", { class: "command" }, String(c.keystrokes ?? JSON.stringify(c)))),
            reply.task_complete ? el("span", { class: "chip ok" }, "task_complete") : null,
          )
        : null,
      el("details", { open: !reply }, el("summary", {}, "reply"), el("pre", {}, m.content)),
    );
  }
  const label = m.role === "system" ? "harness · system prompt" : "harness · user (instruction or terminal output)";
  const body = el("pre", { class: m.role === "user" ? "terminal" : "" }, m.content);
  return el("div", { class: `msg ${m.role}` }, el("div", { class: "role" }, label), m.role === "system" ? el("details", {}, el("summary", {}, `${m.content.length} characters`), body) : body);
}

function conversation(t) {
  let turn = 0;
  return el(
    "section",
    { id: "conversation" },
    el("h3", {}, `Conversation (${t.num_turns} turns, harness ${t.harness})`),
    t.messages.length ? t.messages.map((m) => message(m, m.role === "assistant" ? ++turn : turn)) : el("p", { class: "muted" }, "no messages"),
  );
}

function verifier(t) {
  return el(
    "section",
    { id: "verifier" },
    el("h3", {}, "Verifier"),
    el("div", { id: "reward-flags" }, "flags: ", t.reward_flags.length ? t.reward_flags.map((f) => el("span", { class: "chip graded" }, f)) : el("span", { class: "muted" }, "none")),
    gradings(t),
    el("h4", {}, "stdout"),
    el("pre", { id: "verifier-output", class: "terminal" }, t.verifier_output || "(empty)"),
    t.verifier_files.map((f) => el("details", { class: "verifier-file" }, el("summary", {}, f.path), el("pre", {}, f.content))),
  );
}

// Every grading the sample received, oldest first; the last one is what it serves.
function gradings(t) {
  const history = t.gradings || [];
  const when = (s) => (s ? new Date(s * 1000).toISOString().replace("T", " ").slice(0, 19) : "—");
  const rows = history.map((g, i) =>
    el(
      "tr",
      { class: i === history.length - 1 ? "served" : "" },
      el("td", {}, i === 0 ? "collected" : `regrade ${i}`),
      el("td", {}, when(g.graded_at)),
      el("td", {}, num(g.reward)),
      el("td", {}, statusChip(g.status)),
      el("td", {}, g.reward_flags.length ? g.reward_flags.map((f) => el("span", { class: "chip graded" }, f)) : "—"),
      el("td", { title: g.grader_version }, g.grader_version.slice(0, 12) || "—"),
      el("td", { title: g.tests_digest }, g.tests_digest.slice(0, 12) || "—"),
    ),
  );
  return el(
    "section",
    { id: "gradings" },
    el("h4", {}, `Gradings (${history.length}; the last is served)`),
    history.length
      ? el(
          "table",
          { class: "facts" },
          el("thead", {}, el("tr", {}, ["grading", "graded at", "reward", "status", "flags", "grader", "tests"].map((h) => el("th", {}, h)))),
          el("tbody", {}, rows),
        )
      : el("p", { class: "muted" }, "never graded (it ended before verification)"),
  );
}

function facts(t) {
  const rows = [
    ["status", statusChip(t.status)],
    ["reward", num(t.reward)],
    ["advantage", num(t.advantage)],
    ["stop reason", t.stop_reason ?? "—"],
    ["policy versions", `${t.policy_version_start} → ${t.policy_version_end}`],
    ["tokens", `${t.prompt_token_ids.length} prompt + ${t.response_token_ids.length} response (${t.loss_mask.filter((m) => m === 1).length} generated)`],
    // A summarized episode: the tokens above are its last segment; a trainer of every segment
    // takes them all.
    ...(t.segments.length > 1 ? [["segments", `${t.segments.length}: ${t.segments.map((s) => s.kind).join(" → ")} · ${t.segments.reduce((n, s) => n + s.prompt_token_ids.length + s.response_token_ids.length, 0)} tokens in all`]] : []),
    ["timings (s)", Object.entries(t.timings).map(([k, v]) => `${k.replace(/_s$/, "")} ${num(v, 2)}`).join(" · ")],
    ["sampling", t.sampling ? JSON.stringify(t.sampling) : "—"],
    // A JSON object, sent as a string (as in Parquet and Arrow).
    ["chat template kwargs", t.chat_template_kwargs],
    ["harness", `${t.harness} ${t.harness_profile_hash.slice(0, 12)}`],
    ["tests digest", t.tests_digest ? t.tests_digest.slice(0, 16) : "—"],
    // Runs masked by an infrastructure fault were run again (1: the first run stood).
    ["attempts", String(t.attempts ?? 1)],
    ["sample seed", t.sample_seed == null ? "—" : String(t.sample_seed)],
  ];
  return el("table", { class: "facts", id: "facts" }, el("tbody", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)))));
}

// The response cut into runs of equal loss mask: generated turns and observation deltas (of
// the trajectory, or of one of its segments: the same token fields).
function runs(t) {
  const out = [{ kind: "prompt", ids: t.prompt_token_ids, start: 0 }];
  let cur = null;
  t.response_token_ids.forEach((id, i) => {
    const kind = t.loss_mask[i] === 1 ? "generated" : "observation";
    if (!cur || cur.kind !== kind) out.push((cur = { kind, ids: [], logprobs: [], versions: [], start: i }));
    cur.ids.push(id);
    cur.logprobs.push(t.rollout_logprobs[i]);
    cur.versions.push(t.response_policy_versions[i]);
  });
  return out;
}

// Generated tokens take the colour of their policy version: the trajectory's versions in
// order, cycling through the palette (.tok.v0 ... .tok.v5).
const PALETTE = 6;
function versionClasses(t) {
  const all = t.segments.length ? t.segments.flatMap((s) => s.response_policy_versions) : t.response_policy_versions;
  const versions = [...new Set(all.filter((v) => v >= 0))].sort((a, b) => a - b);
  return new Map(versions.map((v, i) => [v, `v${i % PALETTE}`]));
}

// The text of every distinct id of the trajectory or segment: {source, note, texts: Map,
// partial: Map}. Any failure leaves ids (an empty map) and says why; it never fails the page.
async function tokenTexts(t) {
  const ids = [...new Set([...t.prompt_token_ids, ...t.response_token_ids])];
  const out = { source: null, note: null, texts: new Map(), partial: new Map() };
  try {
    for (let i = 0; i < ids.length; i += MAX_TOKEN_IDS) {
      const r = await postJSON("/ui/api/tokens", { ids: ids.slice(i, i + MAX_TOKEN_IDS) });
      out.note = r.note ?? out.note;
      if (r.source === null) break;
      out.source = r.source;
      for (const [id, text] of Object.entries(r.texts)) out.texts.set(Number(id), text);
      for (const [id, text] of Object.entries(r.partial)) out.partial.set(Number(id), text);
    }
  } catch (e) {
    out.note = `token texts unavailable (${e.message || e})`;
  }
  if (out.note && out.texts.size === 0) out.source = null;
  return out;
}

// Whitespace and control characters made visible, as marks set apart (class "ws"): "·" a space,
// "→" a tab, "↵" a newline (the chip keeps to one line), "␍" a carriage return, control
// pictures for the other C0 characters and DEL.
const MARKS = { " ": "·", "\t": "→", "\n": "↵", "\r": "␍" };
function markWhitespace(text) {
  const parts = [];
  let plain = "";
  for (const ch of text) {
    const code = ch.codePointAt(0);
    const mark = MARKS[ch] ?? (code < 0x20 ? String.fromCodePoint(0x2400 + code) : code === 0x7f ? "␡" : null);
    if (mark === null) {
      plain += ch;
      continue;
    }
    if (plain) parts.push(plain);
    plain = "";
    parts.push(el("span", { class: "ws" }, mark));
  }
  if (plain) parts.push(plain);
  return parts.length ? parts : [el("span", { class: "ws" }, "∅")];
}

// A chip's content and extra class: the token's text (a token cut from its UTF-8 character: its
// bytes written \xNN, class "partial"), or its id where the text is not known.
function chipContent(id, words) {
  const partial = words.partial.get(id);
  if (partial !== undefined) return [el("span", { class: "bytes" }, markWhitespace(partial)), " partial"];
  const text = words.texts.get(id);
  if (text === undefined) return [String(id), words.source ? " unknown" : ""];
  return [markWhitespace(text), ""];
}

function tokenChips(seg, limit, colours, words) {
  const chips = [];
  const n = Math.min(seg.ids.length, limit);
  for (let i = 0; i < n; i++) {
    const id = seg.ids[i];
    const where = seg.kind === "prompt" ? `prompt ${i}` : `response ${seg.start + i}`;
    let extra = "";
    let cls = `tok ${seg.kind}`;
    if (seg.kind === "generated") {
      extra = ` · logprob ${seg.logprobs[i].toFixed(4)} · policy v${seg.versions[i]}`;
      cls += ` ${colours.get(seg.versions[i])}`;
    }
    const [content, more] = chipContent(id, words);
    // The exact text on hover with the id: quoted and escaped as JSON, or the token's bytes.
    const text = words.texts.get(id);
    const partial = words.partial.get(id);
    const said = partial !== undefined ? ` · bytes ${partial} (not whole UTF-8 characters)` : text !== undefined ? ` · text ${JSON.stringify(text)}` : "";
    chips.push(el("span", { class: cls + more, title: `${where} · id ${id}${extra}${said}`, "data-id": id }, content));
  }
  return chips;
}

// "v3" or "v3→v4" (a turn that spans a weight update).
function versionRuns(versions) {
  const runs = versions.filter((v, i) => i === 0 || v !== versions[i - 1]);
  return runs.map((v) => `v${v}`).join("→");
}

// Blocks of a trajectory's (or a segment's) runs; `replies` captions the generated turns.
function runBlocks(t, words, colours, replies) {
  let turn = 0;
  return runs(t).map((seg) => {
    const chips = el("div", { class: "chips" }, tokenChips(seg, SHOWN, colours, words));
    let title = `${seg.kind} · ${seg.ids.length} tokens`;
    let caption = null;
    if (seg.kind === "generated") {
      const mean = seg.logprobs.reduce((a, b) => a + b, 0) / seg.logprobs.length;
      title = `generated · turn ${++turn} · ${seg.ids.length} tokens · policy ${versionRuns(seg.versions)} · mean logprob ${mean.toFixed(3)}`;
      if (replies[turn - 1] !== undefined) caption = el("details", {}, el("summary", {}, "text of this turn"), el("pre", {}, replies[turn - 1]));
    }
    const more =
      seg.ids.length > SHOWN
        ? el("button", { class: "more", onclick: (e) => { chips.replaceChildren(...tokenChips(seg, Infinity, colours, words)); e.target.remove(); } }, `show all ${seg.ids.length}`)
        : null;
    return el("div", { class: `segment ${seg.kind}` }, el("div", { class: "role" }, title), caption, chips, more);
  });
}

// A summarized episode: each segment before the last (the summary, questions and answers
// calls, and the main conversation they cut) as a boundary that opens onto its tokens, read
// when first opened. Nothing for an episode of one segment.
function boundaries(t) {
  if (t.segments.length < 2) return null;
  const colours = versionClasses(t);
  const earlier = t.segments.slice(0, -1).map((s, i) => {
    const generated = s.loss_mask.filter((m) => m === 1).length;
    const versions = s.response_policy_versions.filter((v) => v >= 0);
    const policy = versions.length ? ` · policy ${versionRuns(versions)}` : "";
    const parent = s.parent === null ? (i === 0 ? "the start" : "fresh context") : `from segment ${s.parent}`;
    const body = el("div", { class: "boundary-body" }, el("p", { class: "muted" }, "reading tokens…"));
    let shown = false;
    const box = el(
      "details",
      { class: `boundary ${s.kind}`, id: `segment-${i}`, "data-kind": s.kind },
      el("summary", {}, `segment ${i}: ${s.kind} · ${parent} · ${s.prompt_token_ids.length} prompt + ${s.response_token_ids.length} response tokens (${generated} generated)${policy}`),
      body,
    );
    box.addEventListener("toggle", async () => {
      if (!box.open || shown) return;
      shown = true;
      const words = await tokenTexts(s);
      body.replaceChildren(...runBlocks(s, words, colours, []));
    });
    return box;
  });
  const last = t.segments.length - 1;
  return el(
    "section",
    { id: "boundaries" },
    el("h3", {}, "Context summarized"),
    el("p", { class: "muted" }, `${t.segments.length} segments; the conversation and tokens shown below are segment ${last}, the main conversation whose workspace was graded. Open a segment for its tokens.`),
    earlier,
  );
}

function tokenView(t, words) {
  const replies = t.messages.filter((m) => m.role === "assistant").map((m) => m.content);
  const colours = versionClasses(t);
  const blocks = runBlocks(t, words, colours, replies);
  return el(
    "section",
    { id: "tokens" },
    el("h3", {}, "Tokens"),
    el(
      "p",
      { class: "legend-row" },
      [...colours].map(([v, cls]) => el("span", { class: `tok generated ${cls}` }, `generated by policy v${v}`)),
      el("span", { class: "tok observation" }, "observation (mask 0)"),
      el("span", { class: "tok prompt" }, "prompt"),
      words.source
        ? el("span", { class: "muted", id: "token-source" }, ` token texts from ${words.source} (· space, → tab, ↵ newline; \\xNN or � a byte of a character cut between tokens); hover a token for its id, position, logprob and policy version`)
        : el("span", { class: "muted", id: "token-source" }, " token ids; hover a token for its position, logprob and policy version"),
    ),
    words.note ? el("p", { class: "note", id: "token-note" }, words.source ? words.note : `Token ids shown: ${words.note}.`) : null,
    blocks,
  );
}

export async function showSample(container, trajectoryId) {
  const t = await getJSON(`/ui/api/trajectories/${encodeURIComponent(trajectoryId)}`);
  const body = el("div", { id: "sample-body" }, conversation(t), verifier(t));
  const cuts = boundaries(t); // kept across the toggle: its opened segments stay open
  let tokens = false;
  let words = null; // the token texts, asked for once, when the tokens are first shown
  const toggle = el("button", { id: "toggle-tokens" }, "Show tokens");
  toggle.addEventListener("click", async () => {
    tokens = !tokens;
    toggle.textContent = tokens ? "Show conversation" : "Show tokens";
    if (tokens && words === null) {
      toggle.disabled = true;
      body.replaceChildren(el("p", { class: "muted" }, "reading token texts…"));
      words = await tokenTexts(t);
      toggle.disabled = false;
    }
    body.replaceChildren(...(tokens ? [tokenView(t, words)] : [conversation(t), verifier(t)]));
  });
  container.replaceChildren(
    el("h2", {}, `Sample ${t.trajectory_id}`),
    el(
      "p",
      {},
      "task ", el("b", {}, t.task_id), " · ",
      link(`#/group/${encodeURIComponent(t.group_id)}`, `its group (${t.group_id})`, { id: "sample-group" }),
      " · rollout ", link(`#/samples?rollout_id=${encodeURIComponent(t.rollout_id)}`, t.rollout_id),
    ),
    facts(t),
    cuts,
    toggle,
    body,
  );
}
