/**
 * The rooms of src/ and the direction of their imports (issue 28; the rooms table of docs/architecture.md): folders follow the
 * data path (wire → protocols → transport → engine client → server → gateway → fronts → cli) and an import never runs
 * back up it; `fronts/router/` and `fronts/front/` share only `fronts/channel/`; and no module imports itself through
 * others (no circular imports). Read from the sources' import lines, so a new room must be placed in `RANK` below.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SRC = join(ROOT, 'src');

/**
 * Each room's place on the data path: a module may import from rooms of a lower rank and its own room only. Rooms are
 * src/'s folders (fronts/ counted per sub-folder) and its top-level modules.
 */
const RANK: Record<string, number> = {
  collections: 0,
  logging: 0,
  'log-sink': 0,
  'line-budget': 0,
  'option-checks': 0,
  'runtime-dir': 0,
  tracing: 1, // above logging and line-budget, whose lines carry OpenTelemetry's diagnostics
  wire: 1,
  protocols: 2,
  transport: 3,
  tokenizer: 3,
  'engine-client': 4,
  sim: 5,
  server: 5,
  lifecycle: 6,
  'gateway-logger': 6,
  gateway: 7,
  'fronts/channel': 8,
  'fronts/router': 9,
  'fronts/front': 9,
  'serve-options': 10,
  'cli-config': 10,
  cli: 11,
};

/**
 * Imports that run against the order on purpose: the transport implements the engine client's link seam
 * (engine-client/link.ts, types only), so the engine client knows no socket.
 */
const ALLOWED_UPWARD = new Set(['src/transport/* -> src/engine-client/link.ts']);

/** A module's room (see `RANK`). */
function roomOf(file: string): string {
  const parts = relative(SRC, file).split('/');
  if (parts.length === 1) return parts[0]!.replace(/\.ts$/, '');
  if (parts[0] === 'fronts' && parts.length > 2) return `fronts/${parts[1]}`;
  return parts[0]!;
}

function* sources(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) yield* sources(p);
    else if (name.endsWith('.ts')) yield p;
  }
}

/** Every module of src/ → the modules of src/ it imports (static `from '...'` and `import('...')`), as paths. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sources(SRC)) {
    const text = readFileSync(file, 'utf8');
    const targets: string[] = [];
    for (const m of text.matchAll(/(?:from|import\()\s*'(\.{1,2}\/[^']+)'/g)) {
      const target = normalize(join(dirname(file), m[1]!.replace(/\.js$/, '.ts')));
      if (existsSync(target)) targets.push(target);
    }
    graph.set(file, targets);
  }
  assert.ok(graph.size > 100, `src/ read: ${graph.size} modules`);
  return graph;
}

const rel = (p: string): string => relative(ROOT, p);

test('every room of src/ has a place on the data path', () => {
  const rooms = new Set([...importGraph().keys()].map(roomOf));
  assert.deepEqual(
    [...rooms].filter((r) => RANK[r] === undefined),
    [],
    'a new room must be placed in RANK (test/layering.test.ts) and in docs/architecture.md',
  );
});

test('no import runs back up the data path, and fronts/router and fronts/front share only fronts/channel', () => {
  const wrong: string[] = [];
  for (const [file, targets] of importGraph()) {
    const from = roomOf(file);
    for (const target of targets) {
      const to = roomOf(target);
      if (from === to || (RANK[to] ?? Infinity) < (RANK[from] ?? -Infinity)) continue;
      const edge = `${rel(file)} -> ${rel(target)}`;
      const pattern = `${rel(dirname(file))}/* -> ${rel(target)}`;
      if (!ALLOWED_UPWARD.has(pattern)) wrong.push(`${edge} (${from} → ${to})`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('no circular imports in src/', () => {
  const graph = importGraph();
  const state = new Map<string, 'open' | 'done'>();
  const cycles: string[] = [];
  const path: string[] = [];
  const visit = (file: string): void => {
    state.set(file, 'open');
    path.push(file);
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'open') cycles.push([...path.slice(path.indexOf(next)), next].map(rel).join(' → '));
      else if (state.get(next) === undefined) visit(next);
    }
    path.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (state.get(file) === undefined) visit(file);
  assert.deepEqual(cycles, []);
});
