/**
 * The routing benchmark's chart (issue #5 part 4): a hand-written SVG of grouped bars, one group per workload, one
 * bar per DP policy, bar height = the policy's TTFT p99 divided by round-robin's in the same run (1.0 = a tie; lower
 * is better). A dashed line marks 1.0. Pure: returns the SVG document as a string. `routingChart` draws it from a
 * routing results file (bench/routing.ts writes both; bench/redraw-charts.ts draws it again from the committed file).
 */

/**
 * One bar value: `ratios[workload][policy]` (NaN or non-finite values draw no bar). `spreads` (optional, same shape):
 * a `[min, max]` whisker drawn over each bar (the spread over repeats).
 */
export interface ChartInput {
  title: string;
  workloads: readonly string[];
  policies: readonly string[];
  ratios: readonly (readonly number[])[];
  spreads?: readonly (readonly (readonly [number, number])[])[];
  /** The y axis's title (default `TTFT p99 / round_robin`, the routing benchmark's). */
  yLabel?: string;
}

const COLORS = ['#8c8c8c', '#4e79a7', '#59a14f', '#e15759', '#f28e2b', '#76b7b2'];

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** Render `input` as a standalone SVG document (UTF-8 text). Throws RangeError when `ratios` or `spreads` do not match the labels. */
export function renderRatioChart(input: ChartInput): string {
  const { workloads, policies, ratios } = input;
  if (ratios.length !== workloads.length || ratios.some((r) => r.length !== policies.length)) {
    throw new RangeError('ratios must have one row per workload and one column per policy');
  }
  if (
    input.spreads &&
    (input.spreads.length !== workloads.length || input.spreads.some((r) => r.length !== policies.length))
  ) {
    throw new RangeError('spreads must have the shape of ratios');
  }
  const W = Math.max(900, 120 + 110 * workloads.length);
  const H = 420;
  const left = 60;
  const right = 20;
  const top = 50;
  const bottom = 90;
  const plotW = W - left - right;
  const plotH = H - top - bottom;
  const finite = [...ratios.flat(), ...(input.spreads ?? []).flat(2)].filter((v) => Number.isFinite(v));
  const maxV = Math.max(1.2, ...finite);
  const niceMax = Math.ceil(maxV * 4) / 4;
  const y = (v: number): number => top + plotH - (v / niceMax) * plotH;
  const groupW = plotW / workloads.length;
  const barW = (groupW * 0.8) / policies.length;
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
  );
  parts.push(`<rect width="${W}" height="${H}" fill="#ffffff"/>`);
  parts.push(
    `<text x="${W / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">${esc(input.title)}</text>`,
  );
  const ticks = Math.round(niceMax / 0.25);
  for (let i = 0; i <= ticks; i++) {
    const v = i * 0.25;
    if (ticks > 12 && i % 2 === 1) continue;
    parts.push(
      `<line x1="${left}" x2="${W - right}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#e6e6e6"/>`,
    );
    parts.push(`<text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${v.toFixed(2)}</text>`);
  }
  parts.push(
    `<text x="16" y="${top + plotH / 2}" text-anchor="middle" transform="rotate(-90 16 ${top + plotH / 2})">${esc(input.yLabel ?? 'TTFT p99 / round_robin')}</text>`,
  );
  workloads.forEach((w, wi) => {
    const gx = left + wi * groupW + groupW * 0.1;
    policies.forEach((p, pi) => {
      const v = ratios[wi][pi];
      if (!Number.isFinite(v)) return;
      const x = gx + pi * barW;
      parts.push(
        `<rect x="${x.toFixed(1)}" y="${y(v).toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${(top + plotH - y(v)).toFixed(1)}" fill="${COLORS[pi % COLORS.length]}"><title>${esc(`${w} / ${p}: ${v.toFixed(3)}`)}</title></rect>`,
      );
      const whisker = input.spreads?.[wi]?.[pi];
      const cx = x + (barW - 2) / 2;
      let labelY = y(v) - 3;
      if (whisker && Number.isFinite(whisker[0]) && Number.isFinite(whisker[1])) {
        const [lo, hi] = whisker;
        parts.push(
          `<line x1="${cx.toFixed(1)}" x2="${cx.toFixed(1)}" y1="${y(lo).toFixed(1)}" y2="${y(hi).toFixed(1)}" stroke="#222"/>`,
        );
        for (const e of [lo, hi])
          parts.push(
            `<line x1="${(cx - 2).toFixed(1)}" x2="${(cx + 2).toFixed(1)}" y1="${y(e).toFixed(1)}" y2="${y(e).toFixed(1)}" stroke="#222"/>`,
          );
        labelY = Math.min(labelY, y(hi) - 3);
      }
      parts.push(
        `<text x="${cx.toFixed(1)}" y="${labelY.toFixed(1)}" text-anchor="middle" font-size="9">${v.toFixed(2)}</text>`,
      );
    });
    parts.push(
      `<text x="${(left + wi * groupW + groupW / 2).toFixed(1)}" y="${top + plotH + 18}" text-anchor="middle">${esc(w)}</text>`,
    );
  });
  parts.push(
    `<line x1="${left}" x2="${W - right}" y1="${y(1).toFixed(1)}" y2="${y(1).toFixed(1)}" stroke="#333" stroke-dasharray="5,4"/>`,
  );
  parts.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}" stroke="#333"/>`);
  parts.push(`<line x1="${left}" x2="${W - right}" y1="${top + plotH}" y2="${top + plotH}" stroke="#333"/>`);
  policies.forEach((p, pi) => {
    const lx = left + pi * 140;
    const ly = H - 30;
    parts.push(`<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${COLORS[pi % COLORS.length]}"/>`);
    parts.push(`<text x="${lx + 18}" y="${ly}">${esc(p)}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}

/** A median and its min–max spread; `null` where the results file holds no finite value (JSON writes NaN as null). */
export interface SpreadJson {
  median: number | null;
  min: number | null;
  max: number | null;
}

/** What `routingChart` reads of a routing results file (bench/results/routing*.json, written by bench/routing.ts). */
export interface RoutingResults {
  seeds: readonly number[];
  group: { ranks: number; slowRank: number; slowdown: number };
  /** One entry per workload, in the chart's order; each has one entry per policy, in the bars' order (the same in all). */
  workloads: ReadonlyArray<{
    name: string;
    policies: Readonly<Record<string, { ratioToRoundRobin: { ttftP99: SpreadJson } }>>;
  }>;
}

const num = (v: number | null): number => v ?? Number.NaN;

/**
 * The routing benchmark's chart of `results`: per workload, each policy's TTFT p99 divided by round_robin's in the
 * same seed, median with its min–max over the seeds (`ratioToRoundRobin.ttftP99`).
 */
export function routingChart(results: RoutingResults): string {
  const { seeds, group, workloads } = results;
  const policies = Object.keys(workloads[0]?.policies ?? {});
  const cells = workloads.map((w) => policies.map((p) => w.policies[p]?.ratioToRoundRobin.ttftP99));
  return renderRatioChart({
    title: `TTFT p99 relative to round_robin, median and min-max over ${seeds.length} seeds (lower is better; ${group.ranks} ranks, rank ${group.slowRank} ${group.slowdown}x slower)`,
    workloads: workloads.map((w) => w.name),
    policies,
    ratios: cells.map((r) => r.map((s) => num(s?.median ?? null))),
    spreads: cells.map((r) => r.map((s) => [num(s?.min ?? null), num(s?.max ?? null)] as const)),
  });
}
