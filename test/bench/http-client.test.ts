/**
 * The load generator's raw HTTP/1.1 connection (bench/throughput/http-client.ts) against a scripted `net` server: the
 * body it hands over is the body the server framed (chunked, Content-Length, until close), whatever the split into
 * reads; keep-alive reuses the socket and `Connection: close` retires it; a broken framing, bytes past the end, a
 * connection cut off mid-body or refused all fail, each with its message.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { HttpConnection, MAX_HEAD_BYTES, type ResponseSink } from '../../bench/throughput/http-client.js';

/** What one response delivered to its sink. */
interface Outcome {
  status: number | null;
  body: string;
  ended: boolean;
  failed: string | null;
}

/** A sink that records, and resolves once the response ended or failed. */
function recorder(): { sink: ResponseSink; done: Promise<Outcome> } {
  const out: Outcome = { status: null, body: '', ended: false, failed: null };
  let resolve!: (o: Outcome) => void;
  const done = new Promise<Outcome>((r) => (resolve = r));
  const sink: ResponseSink = {
    head: (status) => void (out.status = status),
    body: (bytes, start, end) => void (out.body += bytes.toString('latin1', start, end)),
    end: () => {
      out.ended = true;
      resolve(out);
    },
    fail: (message) => {
      out.failed = message;
      resolve(out);
    },
  };
  return { sink, done };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * A server answering each request (read to the end of its head) with `reply(n)`: the pieces to write, 5 ms apart
 * (so they arrive as separate reads), then `'close'` to end the socket or `'hang'` to leave it open.
 */
async function scripted(
  reply: (n: number) => Array<string | 'close' | 'hang'>,
): Promise<{ server: Server; port: number }> {
  let n = 0;
  const server = createServer((socket: Socket) => {
    socket.setNoDelay(true);
    let pending = '';
    // Answers the requests read so far, a piece every 5 ms, while later data keeps arriving.
    const answer = async (): Promise<void> => {
      while (pending.includes('\r\n\r\n')) {
        const head = pending.slice(0, pending.indexOf('\r\n\r\n') + 4);
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
        if (pending.length < head.length + length) return;
        pending = pending.slice(head.length + length);
        for (const piece of reply(n++)) {
          if (piece === 'close') return void socket.end();
          if (piece === 'hang') return;
          socket.write(piece, 'latin1');
          await sleep(5);
        }
      }
    };
    socket.on('data', (c: Buffer) => {
      pending += c.toString('latin1');
      // A fault in the script is the test's: thrown out of the loop as an uncaught exception, as it would be from
      // a synchronous listener.
      answer().catch((err: unknown) =>
        process.nextTick(() => {
          throw err;
        }),
      );
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as AddressInfo).port };
}

const REQUEST = 'POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}';
const readBuffer = Buffer.allocUnsafe(64 * 1024);

async function withConnection(
  reply: (n: number) => Array<string | 'close' | 'hang'>,
  run: (conn: HttpConnection, protocolErrors: string[]) => Promise<void>,
): Promise<void> {
  const { server, port } = await scripted(reply);
  const protocolErrors: string[] = [];
  const conn = new HttpConnection('127.0.0.1', port, readBuffer, (m) => protocolErrors.push(m));
  try {
    await run(conn, protocolErrors);
  } finally {
    conn.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  }
}

async function once(conn: HttpConnection): Promise<Outcome> {
  const { sink, done } = recorder();
  conn.request(REQUEST, sink);
  return done;
}

const CHUNKED =
  'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n';

test(
  'a chunked body arrives whole and unframed, whatever the split into reads; keep-alive reuses the socket',
  { timeout: 30_000 },
  async () => {
    // Splits inside the head's empty line, the size line, the CRLF after data, the last chunk and the trailer.
    const cuts = [
      [CHUNKED],
      [CHUNKED.slice(0, 40), CHUNKED.slice(40)],
      ...[43, 45, 53, 54, 61, 72, 80, 88].map((at) => [CHUNKED.slice(0, at), CHUNKED.slice(at)]),
      CHUNKED.split(''),
    ];
    await withConnection(
      (n) => cuts[n]!,
      async (conn, protocolErrors) => {
        for (let i = 0; i < cuts.length; i++) {
          const out = await once(conn);
          assert.deepEqual(out, { status: 200, body: 'hello, world', ended: true, failed: null }, `split ${i}`);
          assert.equal(conn.usable, true);
        }
        assert.deepEqual(protocolErrors, []);
      },
    );
  },
);

test(
  'Content-Length and until-close bodies; Connection: close retires the socket without an error',
  { timeout: 30_000 },
  async () => {
    await withConnection(
      () => ['HTTP/1.1 500 Internal\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbo', 'om'],
      async (conn) => {
        assert.deepEqual(await once(conn), { status: 500, body: 'boom', ended: true, failed: null });
        assert.equal(conn.usable, false);
      },
    );
    await withConnection(
      () => ['HTTP/1.0 200 OK\r\n\r\nuntil ', 'close', 'close'],
      async (conn) => {
        const out = await once(conn);
        assert.deepEqual(out, { status: 200, body: 'until ', ended: true, failed: null });
      },
    );
  },
);

test(
  'broken framing, bytes past the end, a cut-off body and a refused connection each fail with their message',
  { timeout: 30_000 },
  async () => {
    await withConnection(
      () => ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', 'hang'],
      async (conn) => {
        assert.equal((await once(conn)).failed, 'malformed chunk size "zz"');
      },
    );
    await withConnection(
      () => ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX', 'hang'],
      async (conn) => {
        assert.equal((await once(conn)).failed, 'malformed chunked body: no CRLF after a chunk');
      },
    );
    // A head that never ends is refused once it passes the cap, not gathered for good.
    const header = `X-Long: ${'a'.repeat(4096)}\r\n`;
    await withConnection(
      () => ['HTTP/1.1 200 OK\r\n', ...Array.from({ length: MAX_HEAD_BYTES / 4096 + 1 }, () => header), 'hang'],
      async (conn) => {
        assert.equal((await once(conn)).failed, `response head longer than ${MAX_HEAD_BYTES} bytes`);
      },
    );
    await withConnection(
      () => ['garbage\r\n\r\n', 'hang'],
      async (conn) => {
        assert.equal((await once(conn)).failed, 'malformed status line "garbage"');
      },
    );
    await withConnection(
      () => ['HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA', 'hang'],
      async (conn, protocolErrors) => {
        const out = await once(conn);
        assert.equal(out.ended, true);
        assert.deepEqual(protocolErrors, ['5 bytes past the end of a response']);
        assert.equal(conn.usable, false);
      },
    );
    await withConnection(
      () => ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel', 'close'],
      async (conn) => {
        assert.equal((await once(conn)).failed, 'response cut off before its end');
      },
    );
    await withConnection(
      () => ['close'],
      async (conn) => {
        assert.equal((await once(conn)).failed, 'request failed: socket hang up');
      },
    );
    // A port nobody listens on (the server is closed first).
    const { server, port } = await scripted(() => []);
    await new Promise<void>((r) => server.close(() => r()));
    const conn = new HttpConnection('127.0.0.1', port, readBuffer, () => {});
    assert.match(String((await once(conn)).failed), /^request failed: connect ECONNREFUSED/);
  },
);
