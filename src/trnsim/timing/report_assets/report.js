// Timeline of a trnsim report: one canvas per target, one row per engine or DMA queue,
// one bar per instruction (at least one pixel wide), coloured by opcode (the same colour in
// every report), the critical path underlined in black, a time axis with ticks in the page's
// one unit. Data: a JSON block named by data-src; the unit: data-unit on <body>.
const ROW = 18;
const LEFT = 110;
const AXIS = 22;
const tip = document.getElementById("tip");
const UNIT = document.body.dataset.unit || "us";
const UNIT_NS = Number(document.body.dataset.unitNs || 1000);

function drawRows(c, g, width) {
  c.data.lanes.forEach((name, k) => {
    g.fillStyle = k % 2 ? "#fafafa" : "#f0f0f0";
    g.fillRect(LEFT, k * ROW, width, ROW);
    g.fillStyle = "#222";
    g.fillText(name, 4, k * ROW + 13);
  });
}

function drawBars(c, g, width) {
  const d = c.data, span = c.t1 - c.t0;
  for (let i = 0; i < d.lane.length; i++) {
    const start = d.start[i], end = start + d.dur[i];
    if (end < c.t0 || start > c.t1) continue;
    const x = Math.max(LEFT, LEFT + (start - c.t0) / span * width);
    const x2 = Math.min(c.width, LEFT + (end - c.t0) / span * width);
    const barWidth = x2 - x > 3 ? x2 - x - 1 : Math.max(1, x2 - x);  // a gap between neighbours
    g.fillStyle = d.colors[d.op[i]];
    g.fillRect(x, d.lane[i] * ROW + 2, barWidth, ROW - 4);
    if (c.critical.has(i)) {  // the critical path: a black underline, the bar's colour kept
      g.fillStyle = "#000";
      g.fillRect(x, d.lane[i] * ROW + ROW - 4, barWidth, 3);
    }
  }
}

function tickStep(span) {
  // a 1, 2 or 5 times a power of ten step giving about eight ticks across `span` (page units)
  const rough = span / 8, power = Math.pow(10, Math.floor(Math.log10(rough)));
  return [1, 2, 5, 10].map(m => m * power).find(step => step >= rough);
}

function drawAxis(c, g, width) {
  const top = c.data.lanes.length * ROW, t0 = c.t0 / UNIT_NS, t1 = c.t1 / UNIT_NS;
  const step = tickStep(t1 - t0);
  g.fillStyle = "#222";
  g.fillRect(LEFT, top, width, 1);
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const x = Math.round(LEFT + (t - t0) / (t1 - t0) * width);
    g.fillRect(x, top, 1, 6);
    const label = Number(t.toPrecision(6)) + " " + UNIT;
    g.fillText(label, Math.min(x + 2, c.width - g.measureText(label).width - 2), top + 17);
  }
}

function draw(c) {
  const g = c.getContext("2d"), width = c.width - LEFT;
  g.fillStyle = "#fff";
  g.fillRect(0, 0, c.width, c.height);
  g.font = "11px sans-serif";
  drawRows(c, g, width);
  drawBars(c, g, width);
  drawAxis(c, g, width);
}

function pointAt(c, ev) {
  const box = c.getBoundingClientRect(), x = ev.clientX - box.left, y = ev.clientY - box.top;
  return { t: c.t0 + (x - LEFT) / (c.width - LEFT) * (c.t1 - c.t0), lane: Math.floor(y / ROW) };
}

function hover(c, ev) {
  const p = pointAt(c, ev), d = c.data, slack = (c.t1 - c.t0) / (c.width - LEFT) * 2;
  let found = -1;
  for (let i = 0; i < d.lane.length && found < 0; i++) {
    if (d.lane[i] === p.lane && d.start[i] - slack <= p.t && p.t <= d.start[i] + d.dur[i] + slack) {
      found = i;
    }
  }
  if (found < 0) { tip.style.display = "none"; return; }
  tip.textContent = `${d.ops[d.op[found]]} #${found} on ${d.lanes[d.lane[found]]}: ` +
    `${(d.dur[found] / UNIT_NS).toPrecision(4)} ${UNIT}  ${d.details[d.detail[found]]}  ` +
    d.wheres[d.where[found]];
  tip.style.left = (ev.clientX + 12) + "px";
  tip.style.top = (ev.clientY + 12) + "px";
  tip.style.display = "block";
}

function reset(c) {
  c.t0 = 0;
  c.t1 = Math.max(1, c.data.end);
  draw(c);
}

function legend(c) {
  const box = document.createElement("div");
  box.className = "legend";
  c.data.ops.forEach((name, k) => {
    const item = document.createElement("span");
    item.innerHTML = `<i style="background:${c.data.colors[k]}"></i>`;
    item.append(name);
    box.append(item);
  });
  c.after(box);
}

function setup(c) {
  c.data = JSON.parse(document.getElementById(c.dataset.src).textContent);
  c.critical = new Set(c.data.critical);
  legend(c);
  c.height = c.data.lanes.length * ROW + AXIS;
  let drag = null;
  c.addEventListener("wheel", ev => {
    ev.preventDefault();
    const p = pointAt(c, ev), factor = ev.deltaY > 0 ? 1.25 : 0.8;
    c.t0 = p.t - (p.t - c.t0) * factor;
    c.t1 = p.t + (c.t1 - p.t) * factor;
    draw(c);
  });
  c.addEventListener("mousedown", ev => { drag = { x: ev.clientX, t0: c.t0, t1: c.t1 }; });
  window.addEventListener("mouseup", () => { drag = null; });
  c.addEventListener("mousemove", ev => {
    if (!drag) { hover(c, ev); return; }
    const shift = (ev.clientX - drag.x) / (c.width - LEFT) * (drag.t1 - drag.t0);
    c.t0 = drag.t0 - shift;
    c.t1 = drag.t1 - shift;
    draw(c);
  });
  c.addEventListener("dblclick", () => reset(c));
  c.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  reset(c);
}

document.querySelectorAll("canvas[data-src]").forEach(setup);
function drawUsage(c) {
  // three strips over the whole kernel: DMA bandwidth, SBUF and PSUM bytes per partition held
  const u = c.data.usage, g = c.getContext("2d"), width = c.width - LEFT, strip = 40;
  const series = [["DMA GB/s", u.dma_gbps, 0, "#3465a4"],
    ["SBUF B/partition", u.sbuf, u.sbuf_capacity, "#4e9a06"],
    ["PSUM B/partition", u.psum, u.psum_capacity, "#c17d11"]];
  g.fillStyle = "#fff";
  g.fillRect(0, 0, c.width, c.height);
  g.font = "11px sans-serif";
  series.forEach(([name, values, capacity, colour], k) => {
    const top = k * (strip + 8), most = Math.max(...values, 0), scale = Math.max(capacity, most, 1e-9);
    const step = width / values.length;
    g.fillStyle = "#f0f0f0";
    g.fillRect(LEFT, top, width, strip);
    g.fillStyle = colour;
    values.forEach((v, i) => {
      const h = v / scale * strip;
      g.fillRect(LEFT + i * step, top + strip - h, Math.ceil(step), h);
    });
    g.fillStyle = "#222";
    g.fillText(name, 4, top + 12);
    g.fillText("peak " + Number(most.toPrecision(4)) + (capacity ? " of " + capacity : ""), 4, top + 26);
    if (capacity && most > capacity) {  // the modelled schedule overfills the memory: say so
      g.fillStyle = "#a40000";
      g.fillText("over capacity", 4, top + 38);
    }
  });
}

document.querySelectorAll("canvas[data-usage]").forEach(c => {
  c.data = JSON.parse(document.getElementById(c.dataset.usage).textContent);
  drawUsage(c);
});

