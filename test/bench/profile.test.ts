/**
 * bench/throughput/profile.ts `areaOf`: frames of the bench's compiled build (.build-bench, bench/throughput/
 * build.ts) are reported under their source file, so the profile's buckets (written against src/ paths) take them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { areaOf } from '../../bench/throughput/profile.js';

test('areaOf names compiled bench-build files by their source path, packages by name', { timeout: 5_000 }, () => {
  const at = (url: string, functionName = 'f') => areaOf({ functionName, url, lineNumber: 3 });
  assert.equal(at('file:///work/mg/.build-bench/server/serve-generation.js'), 'src/server/serve-generation.ts');
  assert.equal(at('file:///work/mg/src/server/sse.ts'), 'src/server/sse.ts');
  assert.equal(at('file:///work/mg/.build-bench/_bench/throughput/loop-probe.js'), 'bench/throughput/loop-probe.ts');
  assert.equal(at('file:///work/mg/node_modules/@huggingface/jinja/dist/index.js'), '@huggingface/jinja');
  assert.equal(at('node:internal/streams/writable'), 'node:internal/streams');
  assert.equal(at('', '(garbage collector)'), '(garbage collector)');
});
