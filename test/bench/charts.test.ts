/**
 * The benchmarks' charts (issue 32 part 5): the committed SVGs in bench/results/ are what their committed JSON draws
 * (bench/charts.ts, `npm run bench:charts`), no two of their text labels overlap, every label lies inside the
 * picture, and a whisker far above the bars (an outlier) is cut at the y axis's top with a caret and its value
 * written, instead of setting the scale. The same checks run on synthetic charts made to crowd: long unbreakable
 * names, narrow columns, outliers.
 *
 * A label's box is estimated as the charts lay them out (bench/chart-svg.ts): 0.6 × the font size per character
 * wide, from 0.8 × the font size above the baseline to 0.2 × below, placed by `text-anchor` and turned by the
 * element's `rotate(a cx cy)`; two boxes overlap when no axis separates them (the separating-axis test on the turned
 * rectangles).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { chooseYAxis, wrapText } from '../../bench/chart-svg.js';
import { RESULTS_DIR, chartSources, drawCharts } from '../../bench/charts.js';
import { renderRatioChart, type RoutingResults } from '../../bench/routing/chart.js';
import { renderThroughputChart } from '../../bench/throughput/chart.js';

type Point = readonly [number, number];

interface Label {
  text: string;
  /** The box's corners, in order around it. */
  corners: Point[];
}

const unescape = (s: string): string =>
  s
    .replace(/<[^>]*>/g, '')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&amp;/g, '&');

function attrs(s: string): Map<string, string> {
  return new Map([...s.matchAll(/([\w-]+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));
}

/** The picture's size and every `<text>` element's estimated box. */
function labelsOf(svg: string): { width: number; height: number; labels: Label[] } {
  const root = attrs(/<svg([^>]*)>/.exec(svg)![1]!);
  const rootSize = Number(root.get('font-size') ?? 16);
  const labels = [...svg.matchAll(/<text([^>]*)>([\s\S]*?)<\/text>/g)].map((m) => {
    const a = attrs(m[1]!);
    const text = unescape(m[2]!);
    const fs = Number(a.get('font-size') ?? rootSize);
    const x = Number(a.get('x'));
    const y = Number(a.get('y'));
    const w = [...text].length * fs * 0.6;
    const anchor = a.get('text-anchor') ?? 'start';
    const x0 = anchor === 'middle' ? x - w / 2 : anchor === 'end' ? x - w : x;
    let corners: Point[] = [
      [x0, y - 0.8 * fs],
      [x0 + w, y - 0.8 * fs],
      [x0 + w, y + 0.2 * fs],
      [x0, y + 0.2 * fs],
    ];
    const rot = /rotate\(\s*([-\d.]+)[\s,]+([-\d.]+)[\s,]+([-\d.]+)\s*\)/.exec(a.get('transform') ?? '');
    if (rot) {
      const [deg, cx, cy] = [Number(rot[1]), Number(rot[2]), Number(rot[3])];
      const r = (deg * Math.PI) / 180;
      corners = corners.map(([px, py]) => [
        cx + (px - cx) * Math.cos(r) - (py - cy) * Math.sin(r),
        cy + (px - cx) * Math.sin(r) + (py - cy) * Math.cos(r),
      ]);
    } else {
      assert.equal(a.get('transform'), undefined, `a transform the test cannot read: ${m[1]}`);
    }
    return { text, corners };
  });
  return { width: Number(root.get('width')), height: Number(root.get('height')), labels };
}

/** Whether two convex polygons overlap by more than `eps` px along every axis (separating-axis test). */
function overlap(a: readonly Point[], b: readonly Point[], eps = 0.01): boolean {
  for (const poly of [a, b]) {
    for (let i = 0; i < poly.length; i++) {
      const [x1, y1] = poly[i]!;
      const [x2, y2] = poly[(i + 1) % poly.length]!;
      const nx = y1 - y2;
      const ny = x2 - x1;
      const len = Math.hypot(nx, ny);
      const project = (p: readonly Point[]): [number, number] => {
        const d = p.map(([x, y]) => (x * nx + y * ny) / len);
        return [Math.min(...d), Math.max(...d)];
      };
      const [aMin, aMax] = project(a);
      const [bMin, bMax] = project(b);
      if (aMax <= bMin + eps || bMax <= aMin + eps) return false;
    }
  }
  return true;
}

/** Every pair of overlapping labels and every label not wholly inside the picture, as readable lines. */
function layoutFaults(svg: string): string[] {
  const { width, height, labels } = labelsOf(svg);
  const faults: string[] = [];
  for (let i = 0; i < labels.length; i++) {
    for (let j = i + 1; j < labels.length; j++)
      if (overlap(labels[i]!.corners, labels[j]!.corners))
        faults.push(`"${labels[i]!.text}" overlaps "${labels[j]!.text}"`);
    if (labels[i]!.corners.some(([x, y]) => x < 0 || y < 0 || x > width || y > height))
      faults.push(`"${labels[i]!.text}" leaves the ${width}×${height} picture`);
  }
  return faults;
}

/** The y axis's top: its largest tick label (the labels at the axis's left, `text-anchor="end"`). */
function axisTop(svg: string): number {
  const ticks = [...svg.matchAll(/<text [^>]*text-anchor="end"[^>]*>([\d.]+)<\/text>/g)].map((m) => Number(m[1]));
  assert.ok(ticks.length >= 3, 'the y axis has tick labels');
  return Math.max(...ticks);
}

const carets = (svg: string): number => (svg.match(/<polygon /g) ?? []).length;

const committed = (name: string): string => readFileSync(join(RESULTS_DIR, name), 'utf8');

test('every committed chart is what its committed JSON draws (npm run bench:charts)', () => {
  const drawn = drawCharts();
  assert.deepEqual(
    [...drawn.keys()].sort(),
    ['fairness.svg', 'routing-ranks8.svg', 'routing.svg', 'throughput.svg'],
    'the four committed charts',
  );
  for (const [name, svg] of drawn) assert.equal(committed(name), svg, `${name} is stale: run npm run bench:charts`);
});

test('no two labels of a committed chart overlap, and each lies inside the picture', () => {
  for (const { svg } of chartSources()) {
    const content = committed(svg);
    assert.ok(labelsOf(content).labels.length > 20, `${svg} has its labels`);
    assert.deepEqual(layoutFaults(content), [], svg);
  }
});

/** Each bar's median and whisker top of a committed routing result. */
function routingBars(name: string): Array<{ median: number; max: number }> {
  const json = JSON.parse(committed(name)) as RoutingResults;
  return json.workloads.flatMap((w) =>
    Object.values(w.policies).map((p) => ({
      median: p.ratioToRoundRobin.ttftP99.median ?? Number.NaN,
      max: p.ratioToRoundRobin.ttftP99.max ?? Number.NaN,
    })),
  );
}

test('routing-ranks8.svg: the outlying whisker (6.59) is cut at the axis top with a caret and its value written', () => {
  const bars = routingBars('routing-ranks8.json');
  const tallest = Math.max(...bars.map((b) => b.median));
  const highest = Math.max(...bars.map((b) => b.max));
  assert.ok(highest > 4 * tallest, `the committed result has an outlier (${highest} against bars up to ${tallest})`);
  const svg = committed('routing-ranks8.svg');
  const top = axisTop(svg);
  assert.ok(top < highest, `the axis top ${top} is below the largest whisker ${highest}`);
  assert.ok(top >= tallest, `every bar fits under the axis top ${top}`);
  const cut = bars.filter((b) => b.max > top);
  assert.equal(carets(svg), cut.length, 'one caret per whisker above the axis');
  for (const b of cut) assert.ok(svg.includes(`(max ${b.max.toFixed(2)})`), `the cut whisker's ${b.max} is written`);
  // Bars near 1.0 are not flattened: round_robin's (exactly 1) stand at least 40 % of the plot's height.
  const axis = /<line x1="([\d.]+)" x2="\1" y1="([\d.]+)" y2="([\d.]+)" stroke="#333"\/>/.exec(svg)!;
  const plotH = Number(axis[3]) - Number(axis[2]);
  const heights = [...svg.matchAll(/height="([\d.]+)" fill="[^"]+"><title>[^<]*\/ round_robin: 1\.000</g)].map((m) =>
    Number(m[1]),
  );
  assert.equal(heights.length, 12, "round_robin's bar in each of the 12 workloads");
  for (const h of heights) assert.ok(h / plotH >= 0.4, `a bar of 1.0 is ${((100 * h) / plotH).toFixed(0)} % high`);
});

test('routing.svg and throughput.svg have no outlier: the axis covers every whisker and nothing is cut', () => {
  const routing = committed('routing.svg');
  const highest = Math.max(...routingBars('routing.json').map((b) => b.max));
  assert.ok(axisTop(routing) >= highest, `routing.svg's axis covers ${highest}`);
  assert.equal(carets(routing), 0);
  const throughput = committed('throughput.svg');
  assert.equal(carets(throughput), 0);
  const maxima = [...throughput.matchAll(/<line x1="([\d.]+)" x2="\1" y1="([\d.]+)" y2="([\d.]+)" stroke="#222"/g)];
  assert.ok(maxima.length >= 8, 'the whiskers are drawn');
});

test('fairness.svg: the critical ratio without flow control (986×) is cut at 5 and labelled with its real value', () => {
  const json = JSON.parse(committed('fairness.json')) as {
    summary: { off: { criticalTtftRatio: { median: number; max: number } } };
  };
  const svg = committed('fairness.svg');
  assert.equal(axisTop(svg), 5);
  const { median, max } = json.summary.off.criticalTtftRatio;
  assert.ok(median > 100);
  assert.ok(svg.includes(`>${median.toFixed(0)} (max ${max.toFixed(0)})</text>`), 'the real median and max written');
  assert.equal(carets(svg), 1, 'one caret: the cut bar');
});

test('chooseYAxis: the top is chosen from the bars; whiskers beyond 1.5 × the tallest bar do not raise it', () => {
  const bars = [
    { median: 1.33, high: 1.41 },
    { median: 0.28, high: 6.59 },
    { median: 0.61, high: 1.84 },
  ];
  const axis = chooseYAxis(bars, 1.2);
  assert.deepEqual(axis, { top: 2, step: 0.25 }, 'covers 1.84 (≤ 1.5 × 1.33), not 6.59');
  assert.deepEqual(chooseYAxis(bars.slice(0, 1), 1.2), { top: 1.5, step: 0.25 });
  assert.deepEqual(chooseYAxis([{ median: 24.3, high: 26.3 }], 1), { top: 30, step: 5 }, 'a whisker in range');
  assert.deepEqual(chooseYAxis(bars, 1.2, 1.5, 5), { top: 5, step: 0.5 }, "the caller's top");
  assert.throws(() => chooseYAxis(bars, 1.2, 1.5, 0), RangeError);
});

test('wrapText: breaks after _, - and spaces, cuts a word wider than a line, keeps every character', () => {
  assert.deepEqual(wrapText('multi_turn_shared_system', 12, 105), ['multi_turn_', 'shared_system']);
  assert.deepEqual(wrapText('uniform', 12, 105), ['uniform']);
  assert.deepEqual(wrapText('critical TTFT p99 ÷ unloaded', 12, 150), ['critical TTFT p99 ÷', 'unloaded']);
  const long = 'x'.repeat(40);
  const lines = wrapText(long, 12, 100);
  assert.equal(lines.join(''), long);
  for (const l of lines) assert.ok(l.length * 12 * 0.6 <= 100, l);
});

/** A deterministic stream of numbers in [0, 1). */
function lcg(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return s / 2 ** 31;
  };
}

test('a crowded ratio chart (unbreakable names, narrow columns, outliers, no bars) keeps its labels apart', () => {
  const rnd = lcg(7);
  const workloads = Array.from({ length: 14 }, (_, i) =>
    i === 3 ? 'a_workload_with_a_rather_long_name_of_many_parts' : i === 5 ? 'unbreakablenamewaytoolong' : `w${i}`,
  );
  const policies = Array.from({ length: 8 }, (_, i) => `policy_number_${i}`);
  const ratios = workloads.map((_, wi) => policies.map((__, pi) => (wi === 0 && pi === 2 ? Number.NaN : rnd() * 1.5)));
  const spreads = ratios.map((row, wi) =>
    row.map((v, pi) => [v * 0.8, wi === 2 && pi === 1 ? 40 : v * (1 + rnd())] as const),
  );
  const svg = renderRatioChart({ title: 'A crowded chart '.repeat(12), workloads, policies, ratios, spreads });
  assert.deepEqual(layoutFaults(svg), []);
  assert.ok(axisTop(svg) < 40);
  assert.ok(svg.includes('(max 40.0)'));
  assert.ok(carets(svg) >= 1);
  // A bar cut by the caller's top.
  const capped = renderRatioChart({
    title: 't',
    workloads: ['a', 'b'],
    policies: ['p', 'q'],
    ratios: [
      [900, 1],
      [0.5, 1.2],
    ],
    yTop: 5,
  });
  assert.deepEqual(layoutFaults(capped), []);
  assert.ok(capped.includes('>900 (max 900)</text>'));
  assert.equal(carets(capped), 1);
});

test('a throughput chart with an outlying whisker cuts it and keeps its labels apart', () => {
  const groups = ['stream-512', 'nonstream-512', 'a-scenario-with-a-long-name-indeed'].map((label, gi) => ({
    label,
    bars: [
      { series: 'gateway w1', median: 5 + gi, min: 4, max: gi === 1 ? 80 : 7 },
      { series: 'gateway w2', median: 6, min: 5.5, max: 6.5 },
      {
        series: 'floor',
        median: 3,
        min: 2.5,
        max: 3.5,
        parts: [
          { label: 'ZeroMQ row', value: 1 },
          { label: 'SSE chunk', value: 2 },
        ],
      },
    ],
  }));
  const svg = renderThroughputChart('Gateway CPU per token vs floor '.repeat(4), groups);
  assert.deepEqual(layoutFaults(svg), []);
  assert.ok(axisTop(svg) < 80);
  assert.equal(carets(svg), 1);
  assert.ok(svg.includes('6.0 (max 80.0)'));
});

test('the layout check itself: it finds overlapping and turned labels that touch', () => {
  const svg = (body: string): string =>
    `<svg xmlns="http://www.w3.org/2000/svg" width="200" height="200" font-size="10">${body}</svg>`;
  assert.equal(layoutFaults(svg('<text x="10" y="20">abcdef</text><text x="40" y="22">ghij</text>')).length, 1);
  assert.equal(layoutFaults(svg('<text x="10" y="20">abcdef</text><text x="50" y="20">ghij</text>')).length, 0);
  // Turned upwards about (100, 100): the box spans x 92–102 and y 70–100; a label across at y 80 meets it.
  const turned = '<text x="100" y="100" transform="rotate(-90 100 100)">abcde</text>';
  assert.equal(layoutFaults(svg(`${turned}<text x="101" y="80">x</text>`)).length, 1);
  assert.equal(layoutFaults(svg(`${turned}<text x="103" y="80">x</text>`)).length, 0);
  assert.equal(layoutFaults(svg('<text x="190" y="20">abcdef</text>')).length, 1, 'out of the picture');
});
