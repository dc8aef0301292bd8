/**
 * Per-request CPU of apps side by side in one process (bench:tracing-cost, bench:request-ab): each arm is an app
 * (src/server/app.ts over the fake engine backend, test/server/fake-backend.ts) answering `POST /v1/completions`
 * (`max_tokens` 1) through fastify's `inject`: routing, hooks, the request's logger, validation, tokenization, the
 * route and its record, everything but the socket and the engine wire. The arms run in alternating blocks, the order
 * rotated each round, and CPU comes from `process.cpuUsage()` per block, so the machine's drift (its speed moves by up
 * to 2× within minutes here) hits every arm alike and cancels from their paired ratios. `inject` itself keeps a
 * third or more of each young-generation collection's new objects alive until the next (a bare fastify route, here;
 * a plain async loop ~1 %), the gateway behind a socket ~4 %: code that allocates more per request looks costlier
 * here than it is (docs/benchmarks.md, "The rig's collector is not the gateway's").
 */
import type { FastifyInstance } from 'fastify';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { spread } from './throughput/figures.js';

/** One app under measurement and its µs per request, one sample per round. */
export interface InjectArm {
  readonly name: string;
  readonly app: FastifyInstance;
  readonly samples: number[];
  /**
   * Work an arm's block leaves for later, done at the end of the block inside its measurement, so that its CPU is
   * counted for the arm that caused it (a tracing arm's span export; a timer would run it in any arm's block).
   */
  readonly afterBlock?: () => Promise<void>;
}

/** The request every arm answers: one token, so the figure is the per-request path. */
export const COMPLETION_PAYLOAD = { prompt: 'Tell me about the ranks', max_tokens: 1 };

/** The part of a test FakeBackend (test/server/fake-backend.ts, of any commit) a bench scripts. */
export interface ScriptedBackend<S extends { stream: { pushAll(ids: number[], finish: 'length'): void } }> {
  onSubmit: ((s: S) => void) | null;
  readonly submissions: unknown[];
}

/**
 * Script `backend` to answer every request with one token (finish reason `length`) and keep no record of it. The
 * fake backend keeps every submission for its tests: over a bench's 10^5 requests that held ~13 KB per request, every
 * request's objects then survived the young generation's collections, and its copying cost ~30 µs per request here,
 * more for code that keeps more per request.
 */
export function answerOneToken<S extends { stream: { pushAll(ids: number[], finish: 'length'): void } }>(
  backend: ScriptedBackend<S>,
): void {
  backend.onSubmit = (s) => {
    backend.submissions.length = 0;
    s.stream.pushAll([9707], 'length');
  };
}

/** `n` requests one after another, each awaited (one in flight). Throws on any answer but 200, naming the body. */
export async function drive(app: FastifyInstance, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const res = await app.inject({ method: 'POST', url: '/v1/completions', payload: COMPLETION_PAYLOAD });
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}: ${res.body}`);
  }
}

/** Every order of `0..n-1`. */
function permutations(n: number): number[][] {
  if (n === 0) return [[]];
  return permutations(n - 1).flatMap((p) =>
    Array.from({ length: n }, (_, at) => [...p.slice(0, at), n - 1, ...p.slice(at)]),
  );
}

/**
 * Warm every arm up with one block, then run `rounds` rounds of `block` requests per arm, pushing each block's µs per
 * request onto its arm's samples. The rounds go through every order of the arms in turn: an arm's block costs more
 * after another app's than after its own (its code and data are out of the caches), and a rotation of three arms would
 * put each always after the same one (two identical apps measured 1.4 % apart that way). Progress goes to stderr
 * every 100 rounds.
 */
export async function alternate(arms: readonly InjectArm[], rounds: number, block: number): Promise<void> {
  for (const arm of arms) await drive(arm.app, block); // compiled paths, the validator, the tokenizer's cache
  const orders = permutations(arms.length);
  for (let r = 0; r < rounds; r++) {
    for (const k of orders[r % orders.length]!) {
      const arm = arms[k]!;
      const before = process.cpuUsage();
      await drive(arm.app, block);
      await arm.afterBlock?.();
      const used = process.cpuUsage(before);
      arm.samples.push((used.user + used.system) / block);
    }
    if ((r + 1) % 100 === 0 || r + 1 === rounds)
      process.stderr.write(
        `round ${r + 1}/${rounds}: ${arms.map((a) => `${a.name} ${a.samples.at(-1)!.toFixed(1)}`).join(', ')} µs/request\n`,
      );
  }
}

/** Consecutive chunks the rounds are cut into for the ratio's spread. */
export const CHUNKS = 10;

/**
 * The medians of `CHUNKS` consecutive chunks of `values` (one per round), in order; empty under `CHUNKS` values. A
 * single round swings by 2× when the machine stalls; a chunk's median does not, so their range is the figure's spread.
 */
export function chunkMedians(values: readonly number[]): number[] {
  const size = Math.floor(values.length / CHUNKS);
  return Array.from({ length: size > 0 ? CHUNKS : 0 }, (_, c) => spread(values.slice(c * size, (c + 1) * size)).median);
}

/** `arm`'s samples minus `base`'s, round by round (µs per request). */
export function pairedDifferences(arm: InjectArm, base: InjectArm): number[] {
  return arm.samples.map((x, i) => x - base.samples[i]!);
}

/**
 * The markdown table of `arms` against the first: each arm's µs per request (median, min–max over rounds), its
 * paired difference to the first arm per round (median), and its paired ratio: the median over all rounds and the
 * range of its `chunkMedians`.
 */
export function pairedTable(arms: readonly InjectArm[]): string[] {
  const base = arms[0]!.samples;
  const rows = [
    `| arm | µs per request, median (min–max) | minus ${arms[0]!.name}, paired (µs) | ratio to ${arms[0]!.name}, paired | its ${CHUNKS} chunk medians |`,
    '|-----|------------------|--------------|-------|------------------|',
  ];
  for (const arm of arms) {
    const own = spread(arm.samples);
    const cells = [`${own.median.toFixed(1)} (${own.min.toFixed(1)}–${own.max.toFixed(1)})`];
    if (arm === arms[0]) cells.push('-', '-', '-');
    else {
      const ratios = arm.samples.map((x, i) => x / base[i]!);
      const chunks = chunkMedians(ratios);
      cells.push(
        spread(pairedDifferences(arm, arms[0]!)).median.toFixed(2),
        spread(ratios).median.toFixed(4),
        chunks.length > 0
          ? `${spread(chunks).min.toFixed(3)}–${spread(chunks).max.toFixed(3)}`
          : `- (under ${CHUNKS} rounds)`,
      );
    }
    rows.push(`| ${arm.name} | ${cells.join(' | ')} |`);
  }
  return rows;
}

/** A bench's parsed options (`benchCli`): strings and booleans as `node:util` parseArgs gives them. */
export type BenchValues = Readonly<Record<string, string | boolean | undefined>>;

/**
 * Parse a bench's command line: `options` (node:util parseArgs form) beside `--rounds N`, `--block N` (defaults in
 * `defaults`) and `--help`. Prints `usage` and exits 0 for `--help`; prints the error and `usage` to stderr and exits 2
 * for an unknown option, a count that is not a positive integer, or a value `check` throws for.
 */
export function benchCli(
  name: string,
  usage: string,
  defaults: { rounds: number; block: number },
  options: NonNullable<ParseArgsConfig['options']>,
  check: (values: BenchValues) => void = () => {},
): { values: BenchValues; rounds: number; block: number } {
  try {
    const { values } = parseArgs({
      options: { ...options, help: { type: 'boolean' }, rounds: { type: 'string' }, block: { type: 'string' } },
    });
    if (values.help === true) {
      console.log(usage);
      process.exit(0);
    }
    const count = (k: 'rounds' | 'block'): number => {
      const v = values[k];
      if (v === undefined) return defaults[k];
      if (typeof v !== 'string' || !/^[1-9]\d*$/.test(v)) throw new Error(`--${k} must be a positive integer`);
      return Number(v);
    };
    const counts = { rounds: count('rounds'), block: count('block') };
    check(values);
    return { values, ...counts };
  } catch (error) {
    process.stderr.write(`${name}: ${error instanceof Error ? error.message : String(error)}\n${usage}\n`);
    process.exit(2);
  }
}
