/**
 * A node:test reporter for `npm test` (scripts/test.mjs): one line per failed test as it fails (file, name, error), and
 * at the end the test counts and the slowest files (the sum of each file's top-level test and describe durations: with
 * files run concurrently, a file's own time, not the suite's). A test is counted under the file that defines it (a
 * shared scenario module such as test/e2e/client-scenarios.ts counts once for the files that run it). Plain
 * JavaScript: reporters are loaded before any loader hook.
 *
 * With `GATEWAY_TEST_DURATIONS` set to a file path, each file's time (ms) is also merged into that JSON object at the
 * end, where scripts/test.mjs reads it to start the longest files first next time.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';

/** @param {AsyncIterable<{ type: string, data: any }>} source */
export default async function* filesReporter(source) {
  const files = new Map();
  let pass = 0;
  let fail = 0;
  let skip = 0;
  // With source maps the file is the original .ts beside the transpiled copy (scripts/test-build.mjs): drop the ../ part.
  const fileOf = (data) => (data.file ? relative(process.cwd(), data.file).replace(/^(\.\.\/)+/, '') : '(no file)');
  for await (const event of source) {
    const { type, data } = event;
    if (type !== 'test:pass' && type !== 'test:fail') continue;
    const file = fileOf(data);
    const f = files.get(file) ?? { ms: 0, tests: 0, failed: 0 };
    files.set(file, f);
    if (data.nesting === 0) f.ms += data.details?.duration_ms ?? 0;
    // A suite is not a test, but a failed one (a `before` hook that threw, a describe that timed out) is a failure:
    // its tests are then only "cancelled by parent", so without this line the run would fail with nothing shown.
    const suite = data.details?.type === 'suite';
    if (suite && (type === 'test:pass' || data.details?.error?.failureType === 'subtestsFailed')) continue;
    if (!suite) f.tests++;
    if (type === 'test:pass') {
      if (data.skip || data.todo) skip++;
      else pass++;
      continue;
    }
    // A test cancelled by its failed suite is shown through the suite. A top-level one has no suite to show it: the file
    // ended with it pending (its event loop emptied while the test awaited), and that is its failure.
    const cancelled = data.details?.error?.failureType === 'cancelledByParent';
    if (cancelled && data.nesting > 0) continue;
    fail++;
    f.failed++;
    const err = data.details?.error;
    const cause = err?.cause ?? err;
    const text = String(cause?.stack ?? cause?.message ?? cause)
      .split('\n')
      .slice(0, 12)
      .join('\n    ');
    yield `\n✗ ${file}: ${data.name}\n    ${text}\n`;
  }
  if (process.env.GATEWAY_TEST_DURATIONS) recordDurations(process.env.GATEWAY_TEST_DURATIONS, files);
  const slow = [...files].sort((a, b) => b[1].ms - a[1].ms).slice(0, 12);
  yield `\n${pass} passed, ${fail} failed, ${skip} skipped, in ${files.size} files. Slowest files (s):\n`;
  for (const [file, f] of slow)
    yield `  ${(f.ms / 1000).toFixed(1).padStart(6)}  ${file}${f.failed > 0 ? `  (${f.failed} failed)` : ''}\n`;
}

/**
 * Merges each file's time (ms) into the JSON object at `path` (written to a temporary name, then renamed). A file
 * that cannot be read is started over; one that cannot be written is left as it was: the order is only a hint.
 */
function recordDurations(path, files) {
  let known = {};
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8'));
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) known = parsed;
  } catch {
    // none yet, or unreadable: start over
  }
  for (const [file, f] of files) if (file !== '(no file)') known[file] = Math.round(f.ms);
  try {
    writeFileSync(`${path}.${process.pid}.tmp`, JSON.stringify(known));
    renameSync(`${path}.${process.pid}.tmp`, path);
  } catch {
    // a read-only checkout: the next run keeps the default order
  }
}

/**
 * `files` in the order a phase starts them: the files that took longest in the last run (the JSON object
 * `recordDurations` keeps at `path`) first, so the last files to end are short ones and the cores stay busy to the end
 * (as Jest orders by its cache of durations); files with no time yet (new, or no earlier run) before all of them, as
 * they may be long; ties in name order. Without a readable file: `files` as given.
 * @param {string[]} files
 * @param {string} path
 * @returns {string[]}
 */
export function longestFirst(files, path) {
  let ms;
  try {
    ms = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return files;
  }
  if (typeof ms !== 'object' || ms === null) return files;
  const key = (f) => (typeof ms[f] === 'number' ? ms[f] : Infinity);
  return [...files].sort((a, b) => key(b) - key(a) || (a < b ? -1 : 1));
}
