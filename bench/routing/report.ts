/**
 * What the routing benchmarks (bench/routing.ts, bench/routing-kv-events.ts, bench/routing-diagnose.ts) share around
 * the runner: the simulated group they all run, their Markdown tables, their results files and how they end on an
 * error.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TextModel } from '../../src/sim/text.js';
import type { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import type { GroupConfig } from './run.js';

/**
 * The benchmarks' group: `ranks` simulated TokenSpeed ranks, the last one 2× slower, 32 running requests and 2048 KV
 * pages of 16 tokens each per rank, a context of 8192 tokens, on `timeScale` wall ms per simulated ms.
 */
export function benchGroup(ranks: number, timeScale: number, tokenizer: GatewayTokenizer): GroupConfig {
  return {
    ranks,
    slowRank: ranks - 1,
    slowdown: 2,
    timeScale,
    maxRunning: 32,
    kvTotalPages: 2048,
    maxModelLen: 8192,
    textModel: new TextModel(tokenizer),
    vocabSize: tokenizer.vocabSize,
    eosTokenIds: tokenizer.eosTokenIds,
  };
}

/** `rows` (the header first) as the lines of a Markdown table, columns padded to their widest cell. */
export function markdownTable(rows: readonly (readonly string[])[]): string[] {
  const header = rows[0] ?? [];
  const widths = header.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]): string => '| ' + r.map((c, i) => c.padEnd(widths[i]!)).join(' | ') + ' |';
  return [line(header), '|' + widths.map((x) => '-'.repeat(x + 2)).join('|') + '|', ...rows.slice(1).map(line)];
}

/**
 * The handler of a benchmark's `main()` rejection: a bad option (RangeError, or node:util `parseArgs`' TypeError) is
 * the user's mistake, so one line and `usage`, exit code 2; anything else its stack, exit code 1.
 */
export function benchFailed(name: string, usage: string): (error: unknown) => void {
  return (error: unknown) => {
    const badOption =
      error instanceof RangeError ||
      (error instanceof TypeError && String((error as { code?: unknown }).code).startsWith('ERR_PARSE_ARGS'));
    const detail =
      error instanceof Error
        ? badOption
          ? `${error.message}\n${usage}`
          : (error.stack ?? error.message)
        : String(error);
    process.stderr.write(`\n${name} failed: ${detail}\n`);
    process.exitCode = badOption ? 2 : 1;
  };
}

/** `group` as the results files record it (without the text model). */
export function groupJson(group: GroupConfig): Omit<GroupConfig, 'textModel'> {
  const { textModel: _t, ...rest } = group;
  return rest;
}

/** Writes `content` to bench/results/`fileName` (creating the folder); returns the path relative to the repository. */
export async function writeResult(fileName: string, content: string): Promise<string> {
  const dir = fileURLToPath(new URL('../results/', import.meta.url));
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, fileName), content);
  return join('bench', 'results', fileName);
}
