// The dashboard's history charts (issue 32 part 4), drawn by uPlot (the `uplot` package, served same-origin by the
// gateway as /dashboard/vendor/uPlot.iife.min.js, which defines the global `uPlot`). The gateway keeps no history
// of these figures: the page accumulates one point per poll of /v1/gateway/ranks, the last HISTORY_S seconds of
// them, and forgets them on reload.

/** Seconds of history kept and drawn. */
export const HISTORY_S = 600;
/** Points kept at most, whatever the poll rate (10 minutes at 2 polls a second, with room). */
const MAX_POINTS = 1500;

const COLORS = ['#4c8dff', '#3ecf8e', '#f5b942', '#f0616d', '#b57cff', '#2ec4d6', '#ff8c42', '#9bd14a'];
const AXIS = { stroke: '#8a97b1', grid: { stroke: '#273149', width: 1 }, ticks: { stroke: '#273149', width: 1 } };

/**
 * The charts: each has an id (its container `#chart-<id>`), a unit for its axis, a y range, and whether it has one
 * series per DP rank (`perRank`) or fixed ones (`series`, each with a `pick(view)` of the ranks answer).
 */
const CHARTS = [
  {
    id: 'tokens',
    unit: 'tokens/s',
    series: [{ label: 'total', pick: (v) => v.groups.reduce((n, g) => n + sumTokens(g), 0) }],
  },
  {
    id: 'ttft',
    unit: 'ms',
    series: [
      { label: 'TTFT p50', pick: (v) => v.latency.ttft_ms.p50 },
      { label: 'TTFT p99', pick: (v) => v.latency.ttft_ms.p99 },
    ],
  },
  { id: 'itl', unit: 'ms', series: [{ label: 'ITL p99', pick: (v) => v.latency.itl_ms.p99 }] },
  { id: 'inflight', unit: 'requests', perRank: (r) => r.in_flight },
  {
    id: 'kv',
    unit: '%',
    max: 100,
    perRank: (r) => (r.kv_cache_usage === null ? null : r.kv_cache_usage * 100),
  },
];

function sumTokens(group) {
  return group.ranks.reduce((n, r) => n + r.generation_tokens_per_second, 0);
}

/** The per-rank series of `view`: one per DP rank of every group (labels name the group when there are several). */
function rankSeries(view) {
  const several = view.groups.length > 1;
  return view.groups.flatMap((g) =>
    g.ranks.map((r) => ({
      key: `${g.name}|${r.dp_rank}`,
      label: several ? `${g.name} DP ${r.dp_rank}` : `DP ${r.dp_rank}`,
    })),
  );
}

/** One chart's accumulated points: `times` (Unix s) and one array per series, all the same length. */
class Series {
  constructor(labels) {
    this.labels = labels;
    this.times = [];
    this.values = labels.map(() => []);
  }

  add(t, values) {
    this.times.push(t);
    values.forEach((v, i) => this.values[i].push(v ?? null));
    // Bounded: the last HISTORY_S seconds, and never more than MAX_POINTS points.
    let drop = 0;
    while (drop < this.times.length && (this.times[drop] < t - HISTORY_S || this.times.length - drop > MAX_POINTS))
      drop++;
    if (drop > 0) {
      this.times.splice(0, drop);
      for (const vs of this.values) vs.splice(0, drop);
    }
  }

  data() {
    return [this.times, ...this.values];
  }
}

/** uPlot options for a chart of `labels` (`unit` on its axis, y from 0 to `max` or the data's top) `width` wide. */
function options(spec, labels, width) {
  return {
    width,
    height: 150,
    cursor: { drag: { x: false, y: false } },
    legend: { live: false },
    scales: { y: { range: (_u, _min, top) => [0, spec.max ?? (top > 0 ? top * 1.1 : 1)] } },
    axes: [AXIS, { ...AXIS, size: 52, label: spec.unit, labelSize: 14, labelFont: '11px system-ui' }],
    series: [
      {},
      ...labels.map((label, i) => ({
        label,
        stroke: COLORS[i % COLORS.length],
        width: 1.5,
        points: { show: false },
      })),
    ],
  };
}

/** Every chart of the page, fed one ranks answer per poll (`add`). */
export class Charts {
  constructor(root) {
    this.root = root;
    this.charts = new Map(); // id -> { spec, keys, series, plot }
    root.ownerDocument.defaultView.addEventListener('resize', () => this.resize());
  }

  /** Add the point of `view` (a /v1/gateway/ranks answer) at its timestamp and redraw every chart. */
  add(view) {
    const ranks = rankSeries(view);
    const byKey = new Map(view.groups.flatMap((g) => g.ranks.map((r) => [`${g.name}|${r.dp_rank}`, r])));
    for (const spec of CHARTS) {
      const labels = spec.perRank ? ranks.map((r) => r.label) : spec.series.map((s) => s.label);
      const keys = spec.perRank ? ranks.map((r) => r.key).join() : labels.join();
      let c = this.charts.get(spec.id);
      // The set of ranks is fixed for a gateway's life; a change (another gateway behind the URL) starts over.
      if (c === undefined || c.keys !== keys) c = this.create(spec, labels, keys);
      const values = spec.perRank
        ? ranks.map((r) => spec.perRank(byKey.get(r.key)))
        : spec.series.map((s) => s.pick(view));
      c.series.add(view.timestamp, values);
      c.plot.setData(c.series.data());
      // What the chart was given, for a reader of the page (the browser test): its points and its newest values.
      c.box.dataset.points = String(c.series.times.length);
      c.box.dataset.last = values.map((v) => v ?? '').join(',');
    }
  }

  create(spec, labels, keys) {
    const box = this.root.querySelector(`#chart-${spec.id} .plot`);
    this.charts.get(spec.id)?.plot.destroy();
    const series = new Series(labels);
    const plot = new uPlot(options(spec, labels, box.clientWidth), series.data(), box);
    const c = { spec, keys, series, plot, box };
    this.charts.set(spec.id, c);
    return c;
  }

  resize() {
    for (const c of this.charts.values()) c.plot.setSize({ width: c.box.clientWidth, height: 150 });
  }
}
