/**
 * The HTTP-edge flags of `model-gateway serve` (src/cli.ts `parseServeArgs` → `edge`; issue #10), the
 * `MODEL_GATEWAY_API_KEY` fallback, the option checks of src/server/edge-options.ts, and the startup warning for a
 * non-loopback host without a key (src/gateway/http-app.ts `isLoopbackHost`).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { API_KEY_ENV, parseServeArgs, UsageError, USAGE } from '../../src/cli.js';
import { isLoopbackHost, startGateway } from '../../src/gateway/index.js';
import { captureLogs } from '../helpers/logs.js';
import { resolveEdgeOptions, serverTimeouts } from '../../src/server/edge-options.js';

const NO_ENV = {};

test('edge flags become the edge options', () => {
  assert.deepEqual(parseServeArgs([], NO_ENV), {});
  assert.deepEqual(
    parseServeArgs(
      [
        '--api-key',
        'a',
        '--api-key',
        'b',
        '--metrics-require-key',
        '--allowed-origins',
        '["https://x.example", "https://y.example"]',
        '--allowed-methods',
        'get,post',
        '--allowed-headers',
        'authorization, content-type',
        '--allow-credentials',
        '--max-concurrent-requests',
        '64',
        '--stream-buffer-bytes',
        '65536',
        '--client-stall-timeout-ms',
        '5000',
        '--request-timeout-ms',
        '10000',
        '--tokenizer-queue-jobs',
        '8',
        '--tokenizer-queue-chars',
        '100000',
        '--tokenize-body-limit',
        '65536',
      ],
      NO_ENV,
    ),
    {
      edge: {
        apiKeys: ['a', 'b'],
        metricsRequireKey: true,
        cors: {
          allowedOrigins: ['https://x.example', 'https://y.example'],
          allowedMethods: ['GET', 'POST'],
          allowedHeaders: ['authorization', 'content-type'],
          allowCredentials: true,
        },
        maxConcurrentRequests: 64,
        streamBufferBytes: 65536,
        clientStallTimeoutMs: 5000,
        requestTimeoutMs: 10000,
        tokenizerQueueJobs: 8,
        tokenizerQueueChars: 100000,
        tokenizeBodyLimitBytes: 65536,
      },
    },
  );
  assert.deepEqual(parseServeArgs(['--allowed-origins', '*'], NO_ENV), { edge: { cors: { allowedOrigins: ['*'] } } });
  assert.deepEqual(parseServeArgs(['--max-concurrent-requests', '0'], NO_ENV), { edge: { maxConcurrentRequests: 0 } });
});

test(`${API_KEY_ENV} supplies the key unless --api-key is given`, () => {
  assert.deepEqual(parseServeArgs([], { env: { [API_KEY_ENV]: 'from-env' } }), { edge: { apiKeys: ['from-env'] } });
  assert.deepEqual(parseServeArgs(['--api-key', 'flag'], { env: { [API_KEY_ENV]: 'from-env' } }), {
    edge: { apiKeys: ['flag'] },
  });
  assert.deepEqual(parseServeArgs([], { env: { [API_KEY_ENV]: '' } }), {}, 'an empty variable means no key');
  assert.deepEqual(parseServeArgs([], { env: { MODEL_GATEWAY_MAX_CONCURRENT_REQUESTS: '8' } }), {
    edge: { maxConcurrentRequests: 8 },
  });
});

test('bad edge flags are usage errors', () => {
  for (const argv of [
    ['--api-key', ''],
    ['--allowed-methods', 'GET'],
    ['--allow-credentials'],
    ['--allowed-origins', '["a", 1]'],
    ['--allowed-origins', '[nope'],
    ['--allowed-origins', ','],
    ['--max-concurrent-requests', '-1'],
    ['--stream-buffer-bytes', '0'],
    ['--client-stall-timeout-ms', 'soon'],
    ['--request-timeout-ms', '0'],
    ['--tokenizer-queue-jobs', '0'],
    ['--tokenizer-queue-chars', 'lots'],
    ['--tokenize-body-limit', '0'],
  ]) {
    assert.throws(() => parseServeArgs(argv, NO_ENV), UsageError, argv.join(' '));
  }
  for (const flag of [
    '--api-key',
    '--allowed-origins',
    '--max-concurrent-requests',
    '--client-stall-timeout-ms',
    '--request-timeout-ms',
    '--tokenizer-queue-jobs',
    '--tokenizer-queue-chars',
    '--tokenize-body-limit',
  ]) {
    assert.ok(USAGE.includes(flag), `USAGE documents ${flag}`);
  }
});

test('resolveEdgeOptions: documented defaults; serverTimeouts keeps Node consistent', () => {
  const d = resolveEdgeOptions();
  assert.deepEqual(d, {
    apiKeys: [],
    apiKeysFile: null,
    metricsRequireKey: false,
    cors: undefined,
    maxConcurrentRequests: 512,
    streamBackpressure: { maxBufferedBytes: 1024 * 1024, stallTimeoutMs: 30_000 },
    requestTimeoutMs: 60_000,
    offLoop: { maxJobs: 256, maxChars: 8 * 1024 * 1024 },
    tokenizeBodyLimitBytes: 1024 * 1024,
  });
  assert.equal(resolveEdgeOptions({ tokenizeBodyLimitBytes: 5 }).tokenizeBodyLimitBytes, 5);
  assert.throws(() => resolveEdgeOptions({ tokenizeBodyLimitBytes: 0 }), RangeError);
  assert.deepEqual(resolveEdgeOptions({ tokenizerQueueJobs: 2, tokenizerQueueChars: 9 }).offLoop, {
    maxJobs: 2,
    maxChars: 9,
  });
  assert.throws(() => resolveEdgeOptions({ tokenizerQueueChars: 0 }), RangeError);
  assert.throws(() => resolveEdgeOptions({ apiKeys: [''] }), RangeError);
  assert.throws(() => resolveEdgeOptions({ maxConcurrentRequests: 1.5 }), RangeError);
  assert.throws(() => resolveEdgeOptions({ clientStallTimeoutMs: 0 }), RangeError);
  assert.deepEqual(serverTimeouts(60_000), {
    requestTimeout: 60_000,
    headersTimeout: 60_000,
    connectionsCheckingInterval: 6_000,
  });
  assert.deepEqual(serverTimeouts(400), { requestTimeout: 400, headersTimeout: 400, connectionsCheckingInterval: 50 });
  assert.deepEqual(serverTimeouts(600_000), {
    requestTimeout: 600_000,
    headersTimeout: 60_000,
    connectionsCheckingInterval: 30_000,
  });
});

test('isLoopbackHost: only loopback addresses count as local', () => {
  for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]', '::ffff:127.0.0.1'])
    assert.equal(isLoopbackHost(h), true, h);
  for (const h of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.2', 'example.com', '::ffff:10.0.0.1'])
    assert.equal(isLoopbackHost(h), false, h);
});

test('startGateway warns about a non-loopback host without a key, and not with one', async () => {
  // A missing tokenizer folder stops the start right after the check, before anything binds.
  for (const [host, edge, warned] of [
    ['0.0.0.0', undefined, true],
    ['0.0.0.0', { apiKeys: ['k'] }, false],
    ['127.0.0.1', undefined, false],
  ] as const) {
    const { logger, records } = captureLogs('warn');
    await assert.rejects(
      startGateway({ host, port: 0, logger, tokenizerDir: '/nonexistent-tokenizer-dir', ...(edge ? { edge } : {}) }),
    );
    assert.equal(
      records.some((r) => /without an API key/.test(r.msg)),
      warned,
      `${host} ${JSON.stringify(edge)}`,
    );
  }
});
