/**
 * The figures of bench:throughput, derived from the raw samples of each repeat (pure functions): CPU per token / per
 * request by process role, tokens/s, latency, event-loop delay, the floors and each figure's ratio to its floor,
 * summarized over repeats as median with min–max spread. Units: µs of CPU, ms of latency, tokens per second.
 */
import type { LoopDelay, RankCounters } from './gateway-process.js';
import type { ProcessRole } from './proc.js';
import type { LoadResult } from './protocol.js';

/** One measured load phase. */
export interface ScenarioSpec {
  /** e.g. `stream-512`, `nonstream-2000`, `request-stream`, `paced-stream-2000`. */
  name: string;
  /** `token`: CPU per token at saturation; `request`: CPU per request at max_tokens 1; `paced`: ranks at a fixed pace. */
  kind: 'token' | 'request' | 'paced';
  streams: number;
  stream: boolean;
  maxTokens: number;
}

/** What one phase of one repeat measured. `cpu`: µs per role inside the window. */
export interface PhaseSample {
  scenario: string;
  workers: number;
  repeat: number;
  cpu: Record<ProcessRole, number>;
  load: LoadResult;
  loop: LoopDelay;
  /**
   * The ranks' counters over the window (end − start, summed over the ranks; gateway-process.ts `RankCounters`), or
   * null when they could not be read (an older sim, or a rank that did not answer).
   */
  ranks: RankCounters | null;
  /** Whether the gateway went idle after the previous phase before this one started. */
  startedIdle: boolean;
}

/** The floors of one repeat (µs). `sseChunk` by stream count. */
export interface FloorSample {
  repeat: number;
  zmqRow: number;
  detokWindow: number;
  detokTable: number;
  sseChunk: Record<number, number>;
}

/** Median and spread of one figure over the repeats. */
export interface Spread {
  median: number;
  min: number;
  max: number;
  values: number[];
}

/** Median / min / max of the finite `values` (NaN everywhere when there is none). */
export function spread(values: readonly number[]): Spread {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN, values: [...values] };
  const mid = v.length >> 1;
  const median = v.length % 2 === 1 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2;
  return { median, min: v[0]!, max: v[v.length - 1]!, values: [...values] };
}

/** CPU µs of the gateway's own processes (one process, or routing + fronts); ranks and helpers excluded. */
export function gatewayMicros(cpu: Record<ProcessRole, number>): number {
  return cpu.gateway + cpu.routing + cpu.front;
}

/** The unit a phase's CPU is divided by: tokens for token/paced phases, requests for request phases. */
export function units(spec: ScenarioSpec, s: PhaseSample): number {
  return spec.kind === 'request' ? s.load.requests : s.load.tokens;
}

/** The floor of a token phase in µs per token: row + table detokenization (+ SSE chunk when streaming). */
export function tokenFloor(spec: ScenarioSpec, f: FloorSample): number {
  const sse = spec.stream ? (f.sseChunk[spec.streams] ?? Number.NaN) : 0;
  return f.zmqRow + f.detokTable + sse;
}

/** The summarized figures of one (scenario, workers). */
export interface ScenarioFigures {
  scenario: string;
  kind: ScenarioSpec['kind'];
  workers: number;
  /** Gateway µs per unit (token or request), all its processes. */
  gatewayPerUnit: Spread;
  /** Routing-process and front-process µs per unit (NaN with one process). */
  routingPerUnit: Spread;
  frontsPerUnit: Spread;
  ranksPerUnit: Spread;
  /** Tokens per forward pass of a rank (its decode batch) and rows per output message (what the gateway decodes). */
  tokensPerStep: Spread;
  rowsPerBatch: Spread;
  /** Gateway µs per unit ÷ the floor of the same repeat (token phases only). */
  ratioToFloor: Spread;
  unitsPerSecond: Spread;
  /** Gateway CPU in cores (1 = one core busy all the window). */
  gatewayCores: Spread;
  ttftP50: Spread;
  ttftP99: Spread;
  itlP50: Spread;
  itlP99: Spread;
  e2eP50: Spread;
  e2eP99: Spread;
  loopP50: Spread;
  loopP99: Spread;
  loopMax: Spread;
  /** Load generator µs per unit (to show the client is cheap next to the gateway). */
  clientPerUnit: Spread;
  errors: number;
  firstError: string | null;
}

/** Summarizes every repeat of one (scenario, workers), with the floors of the same repeats. */
export function scenarioFigures(
  spec: ScenarioSpec,
  workers: number,
  samples: readonly PhaseSample[],
  floors: readonly FloorSample[],
): ScenarioFigures {
  const per = (f: (s: PhaseSample) => number) => spread(samples.map(f));
  const perUnit = (micros: (s: PhaseSample) => number) => per((s) => micros(s) / units(spec, s));
  const split = workers > 1;
  return {
    scenario: spec.name,
    kind: spec.kind,
    workers,
    gatewayPerUnit: perUnit((s) => gatewayMicros(s.cpu)),
    routingPerUnit: perUnit((s) => (split ? s.cpu.routing : Number.NaN)),
    frontsPerUnit: perUnit((s) => (split ? s.cpu.front : Number.NaN)),
    ranksPerUnit: perUnit((s) => s.cpu.rank),
    tokensPerStep: per((s) => (s.ranks === null ? Number.NaN : s.ranks.tokensGenerated / s.ranks.rounds)),
    rowsPerBatch: per((s) => (s.ranks === null ? Number.NaN : s.ranks.stepRows / s.ranks.steps)),
    ratioToFloor: per((s) => {
      const f = floors.find((x) => x.repeat === s.repeat);
      return spec.kind === 'token' && f ? gatewayMicros(s.cpu) / units(spec, s) / tokenFloor(spec, f) : Number.NaN;
    }),
    unitsPerSecond: per((s) => (units(spec, s) / s.load.windowMs) * 1000),
    gatewayCores: per((s) => gatewayMicros(s.cpu) / (s.load.windowMs * 1000)),
    ttftP50: per((s) => s.load.ttftMs.p50),
    ttftP99: per((s) => s.load.ttftMs.p99),
    itlP50: per((s) => s.load.itlMs.p50),
    itlP99: per((s) => s.load.itlMs.p99),
    e2eP50: per((s) => s.load.e2eMs.p50),
    e2eP99: per((s) => s.load.e2eMs.p99),
    loopP50: per((s) => s.loop.p50Ms),
    loopP99: per((s) => s.loop.p99Ms),
    loopMax: per((s) => s.loop.maxMs),
    clientPerUnit: perUnit((s) => s.load.clientCpuMicros),
    errors: samples.reduce((n, s) => n + s.load.errors, 0),
    firstError: samples.find((s) => s.load.firstError !== null)?.load.firstError ?? null,
  };
}

/** The floors summarized over repeats. */
export interface FloorFigures {
  zmqRow: Spread;
  detokWindow: Spread;
  detokTable: Spread;
  sseChunk: Record<number, Spread>;
}

export function floorFigures(floors: readonly FloorSample[], streams: readonly number[]): FloorFigures {
  return {
    zmqRow: spread(floors.map((f) => f.zmqRow)),
    detokWindow: spread(floors.map((f) => f.detokWindow)),
    detokTable: spread(floors.map((f) => f.detokTable)),
    sseChunk: Object.fromEntries(streams.map((n) => [n, spread(floors.map((f) => f.sseChunk[n] ?? Number.NaN))])),
  };
}

const num = (v: number, digits: number): string => (Number.isFinite(v) ? v.toFixed(digits) : '-');

/** `median (min–max)`, or the median alone when there is one value. */
export function cell(s: Spread, digits = 1): string {
  if (!Number.isFinite(s.median)) return '-';
  const n = s.values.filter((x) => Number.isFinite(x)).length;
  return n > 1 ? `${num(s.median, digits)} (${num(s.min, digits)}–${num(s.max, digits)})` : num(s.median, digits);
}

/** A markdown table. */
export function markdownTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]) => '| ' + r.map((c, i) => c.padEnd(widths[i]!)).join(' | ') + ' |';
  return [line(header), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...rows.map(line)].join('\n');
}

const pair = (a: Spread, b: Spread, digits: number) => `${num(a.median, digits)} / ${num(b.median, digits)}`;

/** The per-token table (saturated token phases). */
export function tokenTable(figures: readonly ScenarioFigures[]): string {
  const rows = figures
    .filter((f) => f.kind === 'token')
    .map((f) => [
      f.scenario,
      String(f.workers),
      cell(f.gatewayPerUnit),
      f.workers > 1 ? pair(f.routingPerUnit, f.frontsPerUnit, 1) : '-',
      cell(f.ratioToFloor, 2),
      num(f.ranksPerUnit.median, 1),
      `${num(f.tokensPerStep.median, 0)} / ${num(f.rowsPerBatch.median, 0)}`,
      cell(f.unitsPerSecond, 0),
      num(f.gatewayCores.median, 2),
      f.scenario.startsWith('stream') ? pair(f.ttftP50, f.ttftP99, 0) : pair(f.e2eP50, f.e2eP99, 0),
      f.scenario.startsWith('stream') ? pair(f.itlP50, f.itlP99, 1) : '-',
      `${num(f.loopP50.median, 1)} / ${num(f.loopP99.median, 0)} / ${num(f.loopMax.median, 0)}`,
      num(f.clientPerUnit.median, 1),
      String(f.errors),
    ]);
  return markdownTable(
    [
      'scenario',
      'workers',
      'gateway µs/token',
      'routing / fronts µs/token',
      '× floor',
      'ranks µs/token',
      'rank tokens per step / rows per batch',
      'tokens/s',
      'gateway cores',
      'TTFT (stream) or E2E p50 / p99 ms',
      'ITL p50 / p99 ms',
      'loop delay p50 / p99 / max ms',
      'client µs/token',
      'errors',
    ],
    rows,
  );
}

/** The per-request table (max_tokens 1). */
export function requestTable(figures: readonly ScenarioFigures[]): string {
  const rows = figures
    .filter((f) => f.kind === 'request')
    .map((f) => [
      f.scenario,
      String(f.workers),
      cell(f.gatewayPerUnit, 0),
      f.workers > 1 ? pair(f.routingPerUnit, f.frontsPerUnit, 0) : '-',
      num(f.ranksPerUnit.median, 0),
      cell(f.unitsPerSecond, 0),
      num(f.gatewayCores.median, 2),
      pair(f.e2eP50, f.e2eP99, 1),
      `${num(f.loopP99.median, 1)} / ${num(f.loopMax.median, 0)}`,
      String(f.errors),
    ]);
  return markdownTable(
    [
      'scenario',
      'workers',
      'gateway µs/request',
      'routing / fronts µs/request',
      'ranks µs/request',
      'requests/s',
      'gateway cores',
      'E2E p50 / p99 ms',
      'loop delay p99 / max ms',
      'errors',
    ],
    rows,
  );
}

/** The paced (ranks at a fixed step time: not saturated) table. */
export function pacedTable(figures: readonly ScenarioFigures[]): string {
  const rows = figures
    .filter((f) => f.kind === 'paced')
    .map((f) => [
      f.scenario,
      String(f.workers),
      cell(f.unitsPerSecond, 0),
      num(f.gatewayCores.median, 2),
      cell(f.gatewayPerUnit),
      f.workers > 1 ? pair(f.routingPerUnit, f.frontsPerUnit, 1) : '-',
      pair(f.ttftP50, f.ttftP99, 0),
      pair(f.itlP50, f.itlP99, 0),
      `${cell(f.loopP50, 1)} / ${cell(f.loopP99, 0)} / ${cell(f.loopMax, 0)}`,
      String(f.errors),
    ]);
  return markdownTable(
    [
      'scenario',
      'workers',
      'tokens/s',
      'gateway cores',
      'gateway µs/token',
      'routing / fronts µs/token',
      'TTFT p50 / p99 ms',
      'ITL p50 / p99 ms',
      'loop delay p50 / p99 / max ms',
      'errors',
    ],
    rows,
  );
}

/** The floors table. */
export function floorTable(f: FloorFigures): string {
  const rows = [
    ['ZeroMQ receive + TokenSpeed decode, per batch row', cell(f.zmqRow, 2)],
    ['detokenize, window re-decode (IncrementalDetokenizer), per token', cell(f.detokWindow, 2)],
    ['detokenize, id → bytes table (TableDetokenizer), per token', cell(f.detokTable, 2)],
    ...Object.entries(f.sseChunk).map(([n, s]) => [
      `minimal node:http SSE writer, per chunk, ${n} streams`,
      cell(s, 1),
    ]),
  ];
  return markdownTable(['floor', 'µs'], rows);
}

/**
 * `--workers N` against one process (issue 9 targets), per token scenario and N > 1, each ratio taken per repeat
 * (repeat r of N workers against repeat r of 1 worker, measured back to back) then summarized: saturated tokens/s
 * N ÷ 1 (target ≥ 1.4 at N = 2), the fronts' CPU per token at N ÷ the single process's CPU per token (what moving
 * HTTP into fronts costs per token; target ≤ 1.10), and the routing process's µs per token (target ≤ 1.5).
 */
export function workersTable(samples: readonly PhaseSample[], specs: readonly ScenarioSpec[]): string {
  const rows: string[][] = [];
  const perToken = (s: PhaseSample, micros: number) => micros / s.load.tokens;
  for (const spec of specs.filter((x) => x.kind === 'token')) {
    const one = samples.filter((s) => s.scenario === spec.name && s.workers === 1);
    const ns = [
      ...new Set(samples.filter((s) => s.scenario === spec.name && s.workers > 1).map((s) => s.workers)),
    ].sort((a, b) => a - b);
    for (const n of ns) {
      const many = samples.filter((s) => s.scenario === spec.name && s.workers === n);
      const paired = many
        .map((m) => [m, one.find((o) => o.repeat === m.repeat)] as const)
        .filter((p): p is readonly [PhaseSample, PhaseSample] => p[1] !== undefined);
      const rate = (s: PhaseSample) => s.load.tokens / s.load.windowMs;
      rows.push([
        spec.name,
        `${n} ÷ 1`,
        cell(spread(paired.map(([m, o]) => rate(m) / rate(o))), 2),
        cell(spread(paired.map(([m, o]) => perToken(m, m.cpu.front) / perToken(o, gatewayMicros(o.cpu)))), 2),
        cell(spread(many.map((m) => perToken(m, m.cpu.routing))), 2),
        cell(spread(many.map((m) => perToken(m, m.cpu.front))), 1),
        cell(spread(paired.map(([, o]) => perToken(o, gatewayMicros(o.cpu)))), 1),
      ]);
    }
  }
  return markdownTable(
    [
      'scenario',
      'workers',
      'tokens/s ratio (≥ 1.4)',
      'front µs/token ÷ 1-process µs/token (≤ 1.10)',
      'routing µs/token (≤ 1.5)',
      'fronts µs/token',
      '1-process µs/token',
    ],
    rows,
  );
}
