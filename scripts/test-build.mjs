/**
 * The transpiled copy of the repository that `npm test` runs (issue 27: the suite in minutes on a 2-core machine).
 *
 * Every file of the working tree (`git ls-files`: tracked and untracked, not ignored) is copied to `.test-build/`
 * under the same path, and every `.ts` file of src/, test/ and bench/ gets its `.js` beside it, transpiled file by
 * file with esbuild (types stripped, nothing bundled; safe because tsconfig.json has `isolatedModules` and
 * `verbatimModuleSyntax`, and the type check is tsc's own phase). Test files and every process they start then run on
 * plain node: loading TypeScript through tsx costs ~1.2 CPU-s per process, and the suite starts hundreds
 * (test/helpers/entry.ts; src/sim/spawn.ts and src/tokenizer/off-loop.ts pick `.js` the same way). Paths that tests
 * compute from `import.meta.url` (fixtures, vectors, README.md, package.json) resolve inside the copy, and
 * `.test-build/node_modules` links to the repository's.
 *
 * The two entries the suite starts hundreds of processes from, the CLI (every gateway) and a simulated rank, are also
 * bundled into one file each (`src/cli.bundle.js`, `src/sim/main.bundle.js`, with the packages that are pure
 * JavaScript inside): loading ~200 modules and their packages file by file cost ~1.1 CPU-s per process, the bundle
 * ~0.4. Each bundled module keeps its own `import.meta.url` (the path of its per-file `.js`; the entry's is the
 * bundle's own), so paths computed from it resolve as in the per-file copy. test/helpers/entry.ts and
 * src/sim/spawn.ts start the bundle when it is there; a test that imports an entry in-process gets the per-file
 * module, so no process holds two copies of a module.
 *
 * The test files are bundled too, in place, their shared modules and packages split into chunks (`bundleTests`): a
 * server test file took ~0.4 CPU-s less that way (1.8–2.3 → 1.3–1.8 CPU-s, paired runs on an idle machine), for ~7
 * CPU-s of esbuild per build.
 *
 * The folder is rebuilt from scratch on every call (a few seconds), so nothing stale is ever run.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';

/** The folder, relative to the repository root. */
export const TEST_BUILD_DIR = '.test-build';

/**
 * Rebuilds `<root>/.test-build` and resolves to its absolute path.
 * @param {string} root the repository root (absolute).
 * @returns {Promise<string>}
 * @throws when git cannot list the files (not a git checkout) or esbuild rejects a file (a syntax error).
 */
export async function buildTestTree(root) {
  const out = join(root, TEST_BUILD_DIR);
  rmSync(out, { recursive: true, force: true });
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  })
    .split('\0')
    .filter((f) => f !== '' && !f.startsWith(`${TEST_BUILD_DIR}/`));
  const made = new Set();
  for (const f of files) {
    const dir = dirname(join(out, f));
    if (!made.has(dir)) {
      mkdirSync(dir, { recursive: true });
      made.add(dir);
    }
    try {
      copyFileSync(join(root, f), join(out, f));
    } catch (error) {
      // A file deleted in the working tree but not yet in the index: there is nothing to copy.
      if (error.code !== 'ENOENT') throw error;
    }
  }
  symlinkSync(join(root, 'node_modules'), join(out, 'node_modules'), 'dir');
  // Deleted in the working tree but still in the index: nothing to transpile either.
  const sources = files.filter(
    (f) => /^(src|test|bench)\/.*\.ts$/.test(f) && !f.endsWith('.d.ts') && existsSync(join(root, f)),
  );
  await build({
    entryPoints: sources.map((f) => join(root, f)),
    outdir: out,
    outbase: root,
    bundle: false,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: 'linked',
    logLevel: 'warning',
  });
  await Promise.all(BUNDLED_ENTRIES.map((entry) => bundleEntry(root, out, entry)));
  await bundleTests(
    root,
    out,
    sources.filter((f) => f.startsWith('test/') && f.endsWith('.test.ts')),
  );
  return out;
}

/**
 * An esbuild plugin that gives each bundled `.ts` module its own `import.meta.url`: the URL of its per-file `.js` in
 * `out`, or `bundle`'s for `entry` (both null: none is special).
 */
function metaUrlPlugin(root, out, entry, bundle) {
  return {
    name: 'per-module-import-meta-url',
    setup(b) {
      b.onLoad({ filter: /\.ts$/ }, (args) => {
        const rel = args.path.slice(root.length).replace(/^\//, '');
        const url = pathToFileURL(rel === entry ? bundle : join(out, rel.replace(/\.ts$/, '.js'))).href;
        const contents = readFileSync(args.path, 'utf8').replaceAll('import.meta.url', JSON.stringify(url));
        return { contents, loader: 'ts' };
      });
    },
  };
}

/** The entries bundled (see the module docs), relative to the root. */
const BUNDLED_ENTRIES = ['src/cli.ts', 'src/sim/main.ts'];

/**
 * Packages left outside the bundles: native code (zeromq), packages that load files of their own by path at run time
 * (pino's transports run thread-stream workers; the tokenizer library; randexp's CommonJS graph), so they load as
 * installed.
 */
const EXTERNAL_PACKAGES = ['zeromq', '@huggingface/tokenizers', 'pino', 'pino-pretty', 'thread-stream', 'randexp'];

/**
 * Bundle `entry` (a `.ts` file under `root`) into `<out>/<entry without .ts>.bundle.js`. Every module's
 * `import.meta.url` becomes the URL of its per-file `.js` in `out` (the entry's: the bundle's), and bundled CommonJS
 * packages get a `require` (createRequire over the bundle's URL).
 */
async function bundleEntry(root, out, entry) {
  const bundle = join(out, entry.replace(/\.ts$/, '.bundle.js'));
  const metaUrl = metaUrlPlugin(root, out, entry, bundle);
  await build({
    entryPoints: [join(root, entry)],
    outfile: bundle,
    bundle: true,
    external: EXTERNAL_PACKAGES,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    plugins: [metaUrl],
    banner: {
      js: "import { createRequire as __testBuildRequire } from 'node:module'; const require = __testBuildRequire(import.meta.url);",
    },
    logLevel: 'warning',
  });
}

/**
 * Bundles every test file in place (`test/<...>.test.js` overwritten by a bundle of it), with the modules and
 * packages it imports split into shared chunks under `test/_chunks/`: a test process then loads its file and a few
 * chunks instead of ~100-300 modules one by one. Same `import.meta.url` and `require` handling as `bundleEntry`.
 */
async function bundleTests(root, out, tests) {
  await build({
    entryPoints: tests.map((f) => join(root, f)),
    outdir: out,
    outbase: root,
    bundle: true,
    splitting: true,
    chunkNames: 'test/_chunks/[name]-[hash]',
    // playwright-core reads files beside its own (__dirname), which a bundle cannot keep; oxfmt loads its native
    // binding and optional formatters on demand.
    external: [...EXTERNAL_PACKAGES, 'playwright-core', 'oxfmt'],
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: 'linked',
    allowOverwrite: true,
    plugins: [metaUrlPlugin(root, out, null, null)],
    banner: {
      js: "import { createRequire as __testBuildRequire } from 'node:module'; const require = __testBuildRequire(import.meta.url);",
    },
    logLevel: 'warning',
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const root = new URL('..', import.meta.url).pathname;
  const started = performance.now();
  const out = await buildTestTree(root);
  process.stderr.write(`${out}: built in ${((performance.now() - started) / 1000).toFixed(1)} s\n`);
}
