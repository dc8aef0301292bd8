#!/usr/bin/env node
// The `model-gateway` executable: registers tsx's ESM loader (tsx/esm/api `register`) so the TypeScript sources run
// as they are, then hands the arguments to src/cli.ts `main`.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli.ts');
process.exitCode = await main(process.argv.slice(2));
