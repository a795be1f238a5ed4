// Small line charts as inline SVG: series = [{name, cls, points: [[x, y], ...]}].

const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(v) {
  return Math.abs(v) >= 100 || Number.isInteger(v) ? String(Math.round(v)) : v.toFixed(2);
}

export function lineChart(title, series, { xLabel = "", width = 400, height = 180 } = {}) {
  const pad = { l: 44, r: 12, t: 22, b: 30 };
  const root = svg("svg", { width, height, class: "chart", role: "img" });
  root.append(svg("text", { x: pad.l, y: 14, class: "chart-title" }, title));
  const points = series.flatMap((s) => s.points);
  if (!points.length) {
    root.append(svg("text", { x: width / 2, y: height / 2, class: "chart-empty" }, "no data yet"));
    return root;
  }
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(0, ...ys), Math.max(...ys)];
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (y0 === y1) y1 = y0 + 1;
  const sx = (x) => pad.l + ((x - x0) / (x1 - x0)) * (width - pad.l - pad.r);
  const sy = (y) => height - pad.b - ((y - y0) / (y1 - y0)) * (height - pad.t - pad.b);
  root.append(svg("line", { x1: pad.l, y1: sy(y0), x2: width - pad.r, y2: sy(y0), class: "axis" }));
  root.append(svg("line", { x1: pad.l, y1: pad.t, x2: pad.l, y2: height - pad.b, class: "axis" }));
  for (const y of [y0, (y0 + y1) / 2, y1]) {
    root.append(svg("text", { x: pad.l - 4, y: sy(y) + 4, class: "tick", "text-anchor": "end" }, fmt(y)));
  }
  for (const x of [x0, x1]) {
    root.append(svg("text", { x: sx(x), y: height - pad.b + 14, class: "tick", "text-anchor": "middle" }, fmt(x)));
  }
  root.append(svg("text", { x: width / 2, y: height - 4, class: "tick", "text-anchor": "middle" }, xLabel));
  let legendX = width - pad.r;
  for (const s of [...series].reverse()) {
    const label = svg("text", { x: legendX, y: 14, class: `legend ${s.cls}`, "text-anchor": "end" }, s.name);
    root.append(label);
    legendX -= s.name.length * 7 + 12;
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    root.append(svg("path", { d, class: `line ${s.cls}` }));
    for (const p of s.points.length <= 40 ? s.points : []) {
      const dot = svg("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.5, class: `dot ${s.cls}` });
      dot.append(svg("title", {}, `${s.name}: ${fmt(p[1])} at ${fmt(p[0])}`));
      root.append(dot);
    }
  }
  return root;
}

export function quantile(sorted, q) {
  if (!sorted.length) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}
