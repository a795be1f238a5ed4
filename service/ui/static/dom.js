// Building DOM nodes without innerHTML: every text from a trajectory is set as text.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function num(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  return Number.isInteger(x) ? String(x) : x.toFixed(digits);
}

export function link(hash, text, attrs = {}) {
  return el("a", { href: hash, ...attrs }, text);
}

// Masked statuses: infrastructure faults, never scored (service/trajectory.py).
export const MASKED = new Set(["verifier_error", "sandbox_error", "policy_error", "cancelled"]);

export function statusChip(status) {
  const cls = status === "ok" ? "ok" : MASKED.has(status) ? "masked" : "graded";
  return el("span", { class: `chip ${cls}`, title: MASKED.has(status) ? "masked" : "" }, status);
}
