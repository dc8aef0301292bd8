/**
 * The `bench:routing` workloads replayed from the Mooncake conversation trace (bench/traces/README.md; issue 29 part
 * 5). Each is a pure function of the trace and the seed.
 *
 * How the trace is scaled to fit this machine:
 * - **Which requests.** The seed shuffles the trace's conversations that have at least two turns (2,259 of 7,373; a
 *   conversation is the requests whose `hash_ids` start with the same two blocks: the shared system prompt, block 0,
 *   then the conversation's own first block) and takes whole conversations until `requests` requests, then the first
 *   `requests` of them in arrival order. Every request keeps its trace prompt: a different seed is another sample.
 *   Turns that would not fit the ranks' context at `kv_pressure`'s scale (prompt + output > `max_model_len`, 8192
 *   tokens: longer than 62 trace blocks, about 31,000 trace tokens) are left out first, as a gateway would refuse
 *   them; sent anyway, the ranks refused them and each counted as a whole-prompt cache miss.
 * - **Lengths.** One 512-token trace block becomes one block of `blockTokens` seeded token ids (the same ids for the
 *   same `hash_id`, so equal ids share prefixes exactly as in the trace): 64 tokens (÷ 8, four simulated KV pages) for
 *   `mooncake` and its variants, 128 (÷ 4) for `kv_pressure`. A partial last block is scaled the same way (at least
 *   1 token). Outputs are the trace's ÷ 16, at least 4 tokens.
 * - **Time.** Arrival times keep the trace's order and relative gaps, compressed linearly so that the mean gap is
 *   `gapMs` engine ms: 12 (`mooncake`), 24 (`kv_pressure`, twice the prompt), where `load` runs the group busy but not
 *   saturated (the trace spans ~59 minutes; a run spans a few seconds of engine time).
 *
 * The workloads:
 * - `mooncake`: the sample as it is;
 * - `kv_pressure`: the same sample with 2× longer blocks, on ranks with half the KV cache (1024 pages of 16 tokens
 *   each): its distinct blocks (about 240,000 tokens) are almost four times the group's cache (65,536), so ranks evict
 *   constantly, which the gateway cannot see without the engines' events;
 * - `rank_restart`: `mooncake`, with rank 0 restarted (a fresh process, empty cache) a third of the way through;
 * - `second_client_prefix`: `mooncake`, where each conversation's first turn is sent by a second client straight to a
 *   rank chosen by the conversation (not measured), so the rank that holds a conversation is one the gateway never
 *   sent it to.
 */
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { seededRandom, type BenchRequest, type PromptSegment, type Workload } from './workloads.js';

/** One trace request (bench/traces/README.md). */
export interface TraceRequest {
  readonly timestamp: number;
  readonly inputLength: number;
  readonly outputLength: number;
  readonly hashIds: readonly number[];
}

/** The trace's block size in tokens. */
const TRACE_BLOCK_TOKENS = 512;
const DEFAULT_TRACE = fileURLToPath(new URL('../traces/mooncake-conversation.jsonl.gz', import.meta.url));

/** Reads the trace (gzip-compressed JSON lines). Throws on a missing file or a malformed line, naming the line. */
export function loadMooncakeTrace(path: string = DEFAULT_TRACE): TraceRequest[] {
  const text = gunzipSync(readFileSync(path)).toString('utf8');
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((line, i) => {
      const o = JSON.parse(line) as Record<string, unknown>;
      const ids = o.hash_ids;
      if (
        typeof o.timestamp !== 'number' ||
        typeof o.input_length !== 'number' ||
        typeof o.output_length !== 'number' ||
        !Array.isArray(ids) ||
        ids.length === 0
      ) {
        throw new Error(`${path}: line ${i + 1} is not a trace request`);
      }
      return {
        timestamp: o.timestamp,
        inputLength: o.input_length,
        outputLength: o.output_length,
        hashIds: ids as number[],
      };
    });
}

/** A conversation's key: its first two blocks (the shared system prompt, then its own first block). */
const conversationOf = (r: TraceRequest): string => r.hashIds.slice(0, 2).join(',');

/**
 * The seeded sample of the module comment: whole conversations of ≥ 2 turns in a seeded order until `requests`
 * requests, then the first `requests` in arrival order. Only the requests `fits` accepts count (default all): a turn
 * that would not fit the group's context is left out, as a gateway would refuse it. Throws RangeError when the trace
 * has too few.
 */
export function sampleConversations(
  trace: readonly TraceRequest[],
  requests: number,
  seed: number,
  fits: (r: TraceRequest) => boolean = () => true,
): TraceRequest[] {
  const byConversation = new Map<string, TraceRequest[]>();
  for (const r of trace) {
    if (!fits(r)) continue;
    const key = conversationOf(r);
    byConversation.set(key, [...(byConversation.get(key) ?? []), r]);
  }
  const keys = [...byConversation.keys()].filter((k) => byConversation.get(k)!.length >= 2).sort();
  const rand = seededRandom(seed ^ 0x6d6f6f6e);
  for (let i = keys.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [keys[i], keys[j]] = [keys[j]!, keys[i]!];
  }
  const picked: TraceRequest[] = [];
  for (const k of keys) {
    if (picked.length >= requests) break;
    picked.push(...byConversation.get(k)!);
  }
  if (picked.length < requests) throw new RangeError(`the trace has fewer than ${requests} multi-turn requests`);
  return picked.sort((a, b) => a.timestamp - b.timestamp).slice(0, requests);
}

/** A trace block's token-id seed: the same for every request naming `hashId`. */
const blockSeed = (hashId: number): number => (Math.imul(hashId + 1, 0x9e3779b1) ^ 0x7ace) >>> 0;

/** Scaling of `toBenchRequests`: tokens per trace block, output divisor, mean arrival gap (engine ms). */
export interface TraceScale {
  blockTokens: number;
  outputDivisor: number;
  gapMs: number;
}

/** Output tokens of a trace request at `scale` (at least 4). */
const outputTokensOf = (r: TraceRequest, scale: TraceScale): number =>
  Math.max(4, Math.round(r.outputLength / scale.outputDivisor));

/**
 * Whether a trace request fits a context of `contextTokens` at `scale`: its prompt (every block at full length, plus
 * its own token) and its output. Pure.
 */
export function fitsContext(r: TraceRequest, scale: TraceScale, contextTokens: number): boolean {
  return r.hashIds.length * scale.blockTokens + 1 + outputTokensOf(r, scale) <= contextTokens;
}

/** The sample as benchmark requests, scaled as the module comment says (ids `name-i`). Pure. */
export function toBenchRequests(sample: readonly TraceRequest[], scale: TraceScale, name: string): BenchRequest[] {
  const t0 = sample[0]?.timestamp ?? 0;
  const span = (sample.at(-1)?.timestamp ?? 0) - t0;
  const factor = span > 0 && sample.length > 1 ? (scale.gapMs * (sample.length - 1)) / span : 0;
  return sample.map((r, i) => {
    const n = r.hashIds.length;
    const lastTrace = Math.min(TRACE_BLOCK_TOKENS, Math.max(1, r.inputLength - TRACE_BLOCK_TOKENS * (n - 1)));
    const prefix: PromptSegment[] = r.hashIds.map((id, k) => ({
      seed: blockSeed(id),
      tokens:
        k < n - 1 ? scale.blockTokens : Math.max(1, Math.round((lastTrace / TRACE_BLOCK_TOKENS) * scale.blockTokens)),
    }));
    return {
      id: `${name}-${i}`,
      atMs: (r.timestamp - t0) * factor,
      prefix,
      // One token of its own: the request's prompt ends where the trace's does.
      promptTokens: 1,
      outputTokens: outputTokensOf(r, scale),
      seed: (Math.imul(i + 1, 0x85ebca6b) ^ r.timestamp) >>> 0 || 1,
    };
  });
}

/** Options of `traceWorkloads`. */
export interface TraceWorkloadOptions {
  requests: number;
  seed: number;
  /** DP ranks of the group (the second client spreads conversations over them). */
  ranks: number;
  /** The ranks' context (`max_model_len`, tokens): longer turns are left out of the sample (`fitsContext`). */
  contextTokens: number;
  /** The group's KV pages per rank: `kv_pressure` runs on half of them. */
  kvTotalPages: number;
}

/** The four trace workloads of the module comment. */
export function traceWorkloads(trace: readonly TraceRequest[], opts: TraceWorkloadOptions): Workload[] {
  const small: TraceScale = { blockTokens: 64, outputDivisor: 16, gapMs: 12 };
  const big: TraceScale = { blockTokens: 128, outputDivisor: 16, gapMs: 24 };
  // One sample for all four, so they differ only in what each changes: it must fit at the larger scale.
  const sample = sampleConversations(trace, opts.requests, opts.seed, (r) => fitsContext(r, big, opts.contextTokens));
  const mooncake = toBenchRequests(sample, small, 'mooncake');
  const pressure = toBenchRequests(sample, big, 'kv_pressure');
  const restartAt = mooncake[Math.floor(mooncake.length / 3)]?.atMs ?? 0;
  const firstTurn = new Set<string>();
  const convRank = new Map<string, number>();
  const second = toBenchRequests(sample, small, 'second_client_prefix').map((req, i) => {
    const key = conversationOf(sample[i]!);
    if (firstTurn.has(key)) return req;
    firstTurn.add(key);
    if (!convRank.has(key)) convRank.set(key, convRank.size % opts.ranks);
    return { ...req, foreignRank: convRank.get(key)! };
  });
  const describe = (what: string) =>
    `${sample.length} requests of multi-turn Mooncake conversations (seeded sample), ${what}`;
  const scaled = (s: TraceScale) =>
    `512-token blocks as ${s.blockTokens} tokens, outputs ÷ ${s.outputDivisor}, mean gap ${s.gapMs} ms`;
  return [
    {
      name: 'mooncake',
      description: describe(scaled(small)),
      setup: [],
      main: mooncake,
    },
    {
      name: 'kv_pressure',
      description: describe(
        `${scaled(big)}, on ranks with half the KV cache (${Math.floor(opts.kvTotalPages / 2)} pages): they evict constantly`,
      ),
      setup: [],
      main: pressure,
      kvTotalPages: Math.max(1, Math.floor(opts.kvTotalPages / 2)),
    },
    {
      name: 'rank_restart',
      description: describe(`as mooncake; rank 0 restarts (empty cache) at ${restartAt.toFixed(0)} engine ms`),
      setup: [],
      main: toBenchRequests(sample, small, 'rank_restart'),
      restart: { rank: 0, atMs: restartAt },
    },
    {
      name: 'second_client_prefix',
      description: describe('as mooncake; each first turn is sent by a second client to a rank of its own'),
      setup: [],
      main: second,
    },
  ];
}
