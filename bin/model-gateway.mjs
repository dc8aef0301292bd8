#!/usr/bin/env node
// The `model-gateway` executable. With a compiled build (`npm run build` → dist/) it runs dist/cli.js on plain node;
// without one it registers tsx's ESM loader (tsx/esm/api `register`) and runs the TypeScript sources as they are.
// After changing src/, run `npm run build` again (or remove dist/) so the executable does not run the old build.
import { existsSync } from 'node:fs';

const compiled = new URL('../dist/cli.js', import.meta.url);
let main;
if (existsSync(compiled)) {
  ({ main } = await import(compiled.href));
} else {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('../src/cli.ts'));
}
process.exitCode = await main(process.argv.slice(2));
