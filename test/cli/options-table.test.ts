/**
 * The option table (src/serve-options.ts, issue 28 part 1) is the only place a `serve` option is declared: help,
 * parseArgs, the environment and config layering, docs/configuration.md and the test harness's inverse all list the
 * same set, and the mapping into `GatewayOptions` and its inverse agree.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { USAGE, parseServeArgs } from '../../src/cli.js';
import { envName } from '../../src/cli-config.js';
import {
  FLAG_ONLY,
  PARSE_ARGS_OPTIONS,
  SERVE_OPTIONS,
  optionHelp,
  renderOptionTables,
  serveArgsOf,
} from '../../src/serve-options.js';
import { CONFIGURATION_PAGE, configurationPage } from '../helpers/option-docs.js';

const NAMES = SERVE_OPTIONS.map((o) => o.name);
const LISTED = NAMES.filter((n) => n !== 'help' && n !== 'version');

test('help, parseArgs and the docs page list every option of the table, in table order', () => {
  assert.deepEqual(Object.keys(PARSE_ARGS_OPTIONS), NAMES);
  const inHelp = [...USAGE.matchAll(/^ {2}--([a-z][a-z-]*)/gm)].map((m) => m[1]);
  assert.deepEqual(inHelp, LISTED);
  assert.ok(USAGE.includes(optionHelp()));
  const inDocs = [...renderOptionTables().matchAll(/^\| `--([a-z][a-z-]*)/gm)].map((m) => m[1]);
  assert.deepEqual(inDocs, LISTED);
  for (const line of USAGE.split('\n')) assert.ok([...line].length <= 100, line);
});

test('docs/configuration.md holds the generated tables (npm run docs:options writes them)', async () => {
  const page = readFileSync(CONFIGURATION_PAGE, 'utf8');
  assert.equal(page, await configurationPage(page), 'docs/configuration.md is stale: run npm run docs:options');
});

/** A valid value of every value option, as a flag would give it. */
const SAMPLES: Readonly<Record<string, string>> = {
  port: '0',
  host: '::1',
  'api-key': 'k1',
  'api-keys-file': '/etc/keys.json',
  tokenizer: '/models/x',
  'served-model-name': 'a',
  model: 'm',
  'tool-call-parser': 'hermes',
  'reasoning-parser': 'qwen3',
  'responses-store': '7',
  workers: '3',
  'log-level': 'warn',
  'log-format': 'json',
  'shutdown-grace-ms': '5',
  'dp-policy': 'cache_aware',
  'load-horizon-ms': '1234',
  'balance-abs-threshold': '3',
  'balance-rel-threshold': '1.25',
  'max-in-flight-per-rank': '6',
  'lora-modules': 'sql=/adapters/sql',
  'max-loras': '3',
  'max-queued': '100',
  'max-queued-per-tenant': '10',
  'queue-timeout-ms': '2000',
  'silence-timeout-ms': '9000',
  'rank-stall-timeout-ms': '8000',
  'handshake-timeout-ms': '7000',
  'max-output-message-bytes': '4096',
  'allowed-origins': 'https://a.example',
  'allowed-methods': 'get',
  'allowed-headers': 'x-a',
  'max-concurrent-requests': '9',
  'body-limit': '2048',
  'tokenize-body-limit': '1024',
  'stream-buffer-bytes': '4096',
  'client-stall-timeout-ms': '1500',
  'request-timeout-ms': '2500',
  'tokenizer-queue-jobs': '5',
  'tokenizer-queue-chars': '500',
  'otlp-traces-endpoint': 'http://127.0.0.1:4318',
};

test('every option but the flag-only ones is an environment variable that means what the flag means', () => {
  const cors = (name: string): Record<string, string> =>
    name.startsWith('allow') && name !== 'allowed-origins' ? { [envName('allowed-origins')]: '*' } : {};
  for (const o of SERVE_OPTIONS) {
    if (FLAG_ONLY.has(o.name) || o.group !== undefined || o.field === undefined) continue;
    const value = o.type === 'boolean' ? 'true' : SAMPLES[o.name];
    assert.ok(value !== undefined, `a sample value for --${o.name}`);
    const flag = o.type === 'boolean' ? [`--${o.name}`] : [`--${o.name}=${value}`];
    const corsFlag = Object.keys(cors(o.name)).length > 0 ? ['--allowed-origins=*'] : [];
    assert.deepEqual(
      parseServeArgs([], { env: { [envName(o.name)]: value, ...cors(o.name) } }),
      parseServeArgs([...flag, ...corsFlag], { env: {} }),
      o.name,
    );
  }
  for (const name of [...FLAG_ONLY].filter((n) => n !== 'config')) {
    assert.throws(() => parseServeArgs([], { env: { [envName(name)]: '1' } }), /MODEL_GATEWAY_/, name);
  }
});

test('the harness inverse gives back every option the table maps, and refuses what it does not know', () => {
  const argv = [
    '--port=0',
    '--host=::1',
    '--api-key=k1',
    '--api-key=k2',
    '--api-keys-file=/etc/keys.json',
    '--tokenizer=/models/x',
    '--served-model-name',
    'a',
    'b',
    '--trust-request-chat-template',
    '--tool-call-parser=hermes',
    '--reasoning-parser=qwen3',
    '--responses-store=7',
    '--workers=3',
    '--otlp-traces-endpoint=http://127.0.0.1:4318/v1/traces',
    '--log-level=warn',
    '--log-format=json',
    '--shutdown-grace-ms=5',
    '--dp-policy=cache_aware',
    '--load-horizon-ms=1234',
    '--balance-abs-threshold=3',
    '--balance-rel-threshold=1.25',
    '--flow-control',
    '--max-in-flight-per-rank=6',
    '--lora-modules=sql=/adapters/sql',
    '--lora-modules={"name":"chat","path":"/adapters/chat","base_model_name":"m"}',
    '--max-loras=3',
    '--allow-runtime-lora-updating',
    '--max-queued=100',
    '--max-queued-per-tenant=10',
    '--queue-timeout-ms=2000',
    '--silence-timeout-ms=9000',
    '--rank-stall-timeout-ms=8000',
    '--handshake-timeout-ms=7000',
    '--max-output-message-bytes=4096',
    '--metrics-require-key',
    '--allowed-origins=https://a.example,https://b.example',
    '--allowed-methods=get,post',
    '--allowed-headers=x-a',
    '--allow-credentials',
    '--max-concurrent-requests=9',
    '--body-limit=2048',
    '--tokenize-body-limit=1024',
    '--stream-buffer-bytes=4096',
    '--client-stall-timeout-ms=1500',
    '--request-timeout-ms=2500',
    '--tokenizer-queue-jobs=5',
    '--tokenizer-queue-chars=500',
  ];
  const opts = parseServeArgs(argv, { env: {} });
  assert.ok(opts !== null);
  const mapped = SERVE_OPTIONS.filter((o) => o.field !== undefined).map((o) => o.name);
  const given = new Set(argv.filter((a) => a.startsWith('--')).map((a) => a.slice(2).split('=')[0]));
  assert.deepEqual(
    mapped.filter((n) => !given.has(n) && n !== 'model'),
    [],
    'the argv above sets every mapped option (--model aside: it excludes --served-model-name)',
  );
  const { sim: _sim, dpSize: _dp, ...rest } = opts as Record<string, unknown>;
  const again = parseServeArgs(serveArgsOf(rest), { env: {} });
  assert.deepEqual(again, opts);
  assert.deepEqual(parseServeArgs(serveArgsOf({ modelId: 'm' }), { env: {} })?.modelId, 'm');
  // Values that start with '-' come back too (written as --name=value).
  const dashed = { modelId: '-m', host: '-1', edge: { apiKeys: ['-k', '--k2'] } };
  assert.deepEqual(parseServeArgs(serveArgsOf(dashed), { env: {} }), dashed);
  assert.throws(() => serveArgsOf({ noSuchOption: 1 }), /'noSuchOption' has no serve flag/);
  assert.throws(() => serveArgsOf({ edge: { noSuchEdge: 1 } }), /'edge.noSuchEdge' has no serve flag/);
});
