import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, chown, lstat, mkdir, rename, stat, symlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import { ConfigError } from '../../src/transport/errors.js';
import { prepareSocketPaths, recordSocketFiles, removeOwnSocketFiles } from '../../src/transport/socket-paths.js';
import { freshDir, recordingLogger } from './helpers.js';

const isRoot = typeof process.geteuid === 'function' && process.geteuid() === 0;

/** Leaves a real Unix socket file at `path` (libuv unlinks on close, so listen elsewhere and rename). */
async function leaveStaleSocket(path: string): Promise<void> {
  const tmp = `${path}.listen`;
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(tmp, resolve);
  });
  await rename(tmp, path);
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** The worker `ipc://DIR/w` with stale sockets (nobody listening) left at both of its derived paths. */
async function workerWithStaleSockets(
  dir: string,
): Promise<{ ep: ReturnType<typeof deriveEndpoints>; inPath: string; outPath: string }> {
  const ep = deriveEndpoints(`ipc://${join(dir, 'w')}`);
  const inPath = join(dir, 'w-in.sock');
  const outPath = join(dir, 'w-out.sock');
  await leaveStaleSocket(inPath);
  await leaveStaleSocket(outPath);
  return { ep, inPath, outPath };
}

test('a missing socket directory is created recursively with mode 0700', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const ep = deriveEndpoints(`ipc://${join(dir, 'a', 'b', 'w')}`);
    const log = recordingLogger();
    await prepareSocketPaths(ep, log);
    for (const d of [join(dir, 'a'), join(dir, 'a', 'b')]) {
      const s = await lstat(d);
      assert.ok(s.isDirectory());
      assert.equal(s.mode & 0o777, 0o700, `${d} mode ${(s.mode & 0o777).toString(8)}`);
    }
    assert.ok(log.records.some((r) => r.msg.includes('created ipc socket directory')));
    await prepareSocketPaths(ep, log); // idempotent
  } finally {
    await cleanup();
  }
});

test('an existing owned 0755 directory is accepted and its permissions are left alone', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const sockDir = join(dir, 'socks');
    await mkdir(sockDir);
    await chmod(sockDir, 0o755);
    await prepareSocketPaths(deriveEndpoints(`ipc://${join(sockDir, 'w')}`));
    assert.equal((await stat(sockDir)).mode & 0o777, 0o755);
  } finally {
    await cleanup();
  }
});

test('stale Unix sockets at the input and output paths are unlinked and logged', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const { ep, inPath, outPath } = await workerWithStaleSockets(dir);
    assert.ok((await lstat(inPath)).isSocket());
    const log = recordingLogger();
    await prepareSocketPaths(ep, log);
    await assert.rejects(lstat(inPath), { code: 'ENOENT' });
    await assert.rejects(lstat(outPath), { code: 'ENOENT' });
    const removed = log.records.filter((r) => r.level === 'warn' && r.msg.includes('stale ipc socket'));
    assert.deepEqual(removed.map((r) => r.obj.path).sort(), [inPath, outPath].sort());
  } finally {
    await cleanup();
  }
});

test('a regular file, a directory or a symlink at a socket path is refused and left in place', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const ep = deriveEndpoints(`ipc://${join(dir, 'w')}`);
    const inPath = join(dir, 'w-in.sock');
    const outPath = join(dir, 'w-out.sock');

    await writeFile(inPath, 'precious');
    await assert.rejects(
      prepareSocketPaths(ep),
      (e: unknown) => e instanceof ConfigError && e.message.includes(inPath) && /regular file/.test(e.message),
    );
    assert.ok((await lstat(inPath)).isFile(), 'the file is still there');

    await rename(inPath, join(dir, 'elsewhere'));
    await mkdir(outPath);
    await assert.rejects(prepareSocketPaths(ep), /is a directory, not a stale socket/);
    assert.ok((await lstat(outPath)).isDirectory());

    await rename(outPath, join(dir, 'elsewhere-dir'));
    await symlink(join(dir, 'elsewhere'), outPath);
    await assert.rejects(prepareSocketPaths(ep), /is a symlink/);
    assert.ok((await lstat(outPath)).isSymbolicLink());
  } finally {
    await cleanup();
  }
});

test('a socket directory that is a symlink (even to our own directory) is refused', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    await mkdir(join(dir, 'real'), { mode: 0o700 });
    await symlink(join(dir, 'real'), join(dir, 'link'));
    await assert.rejects(
      prepareSocketPaths(deriveEndpoints(`ipc://${join(dir, 'link', 'w')}`)),
      (e: unknown) => e instanceof ConfigError && /is a symlink, not a directory/.test(e.message),
    );
  } finally {
    await cleanup();
  }
});

test('a socket "directory" that is a regular file is refused', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    await writeFile(join(dir, 'f'), '');
    await assert.rejects(
      prepareSocketPaths(deriveEndpoints(`ipc://${join(dir, 'f', 'w')}`)),
      /regular file, not a directory|ENOTDIR/,
    );
  } finally {
    await cleanup();
  }
});

test(
  'a socket directory owned by another uid is refused, permissions untouched',
  { skip: !isRoot && 'needs root to chown' },
  async () => {
    const { dir, cleanup } = await freshDir();
    try {
      const foreign = join(dir, 'foreign');
      await mkdir(foreign, { mode: 0o777 });
      await chmod(foreign, 0o777);
      await chown(foreign, 65534, 65534);
      await assert.rejects(
        prepareSocketPaths(deriveEndpoints(`ipc://${join(foreign, 'w')}`)),
        (e: unknown) => e instanceof ConfigError && /owned by uid 65534/.test(e.message),
      );
      const s = await stat(foreign);
      assert.equal(s.uid, 65534);
      assert.equal(s.mode & 0o777, 0o777);
    } finally {
      await cleanup();
    }
  },
);

test('a pino logger is accepted as the transport logger (stale-socket warning as JSON)', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const logger = pino({ level: 'info' }, sink);
    await leaveStaleSocket(join(dir, 'w-in.sock'));
    await prepareSocketPaths(deriveEndpoints(`ipc://${join(dir, 'w')}`), logger);
    const warn = lines
      .map((l) => JSON.parse(l) as { level: number; msg: string; path: string })
      .find((l) => l.level === 40);
    assert.ok(warn, lines.join(''));
    assert.match(warn.msg, /stale ipc socket/);
    assert.equal(warn.path, join(dir, 'w-in.sock'));
  } finally {
    await cleanup();
  }
});

test('a socket someone still accepts connections on is refused and left in place (another gateway is serving it)', async () => {
  const { dir, cleanup } = await freshDir();
  const inPath = join(dir, 'w-in.sock');
  const server = createServer((c) => c.destroy());
  await new Promise<void>((resolve) => server.listen(inPath, resolve));
  try {
    await assert.rejects(
      prepareSocketPaths(deriveEndpoints(`ipc://${join(dir, 'w')}`)),
      (e: unknown) =>
        e instanceof ConfigError &&
        e.message.includes(inPath) &&
        /in use: a live process accepts connections on it/.test(e.message),
    );
    assert.ok((await lstat(inPath)).isSocket(), 'the live socket file is still there');
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await cleanup();
  }
});

test('a socket directory writable by group or others is refused with the fix (chmod 700), its mode untouched', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    for (const [mode, who] of [
      [0o777, 'its group and others'],
      [0o775, 'its group'],
      [0o1777, 'its group and others'],
      [0o757, 'others'],
    ] as const) {
      const sockDir = join(dir, `m${mode.toString(8)}`);
      await mkdir(sockDir);
      await chmod(sockDir, mode);
      await assert.rejects(prepareSocketPaths(deriveEndpoints(`ipc://${join(sockDir, 'w')}`)), (e: unknown) => {
        assert.ok(e instanceof ConfigError);
        assert.ok(e.message.includes(`writable by ${who}`), e.message);
        assert.ok(e.message.includes(`chmod 700 ${sockDir}`), e.message);
        return true;
      });
      assert.equal((await stat(sockDir)).mode & 0o7777, mode, 'permissions are never changed');
    }
  } finally {
    await cleanup();
  }
});

test('removeOwnSocketFiles removes the bound files, but not one replaced since (another inode)', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const { ep, inPath, outPath } = await workerWithStaleSockets(dir);
    const files = recordSocketFiles(ep);
    assert.deepEqual(
      files.map((f) => f.path),
      [inPath, outPath],
    );
    await rename(outPath, join(dir, 'moved'));
    await leaveStaleSocket(outPath); // a newer owner's file at the same path
    const log = recordingLogger();
    assert.deepEqual(removeOwnSocketFiles(files, log), [inPath]);
    await assert.rejects(lstat(inPath), { code: 'ENOENT' });
    assert.ok((await lstat(outPath)).isSocket(), "the newer owner's file is left alone");
    assert.ok(log.records.some((r) => /replaced since this gateway bound it/.test(r.msg)));
    assert.deepEqual(removeOwnSocketFiles(files), [], 'a second call is a no-op');
  } finally {
    await cleanup();
  }
});

test('a socket directory below a regular file is a ConfigError naming the path (ENOTDIR), not a raw fs error', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    await writeFile(join(dir, 'f'), '');
    await assert.rejects(
      prepareSocketPaths(deriveEndpoints(`ipc://${join(dir, 'f', 'sub', 'w')}`)),
      (e: unknown) => e instanceof ConfigError && e.message.includes(join(dir, 'f')) && /ENOTDIR/.test(e.message),
    );
  } finally {
    await cleanup();
  }
});

test(
  'a socket directory that cannot be created (under /proc) is a ConfigError, and returns (Node 20 recursive mkdir never does)',
  { skip: process.platform !== 'linux' && 'needs /proc', timeout: 10_000 },
  async () => {
    await assert.rejects(
      prepareSocketPaths(deriveEndpoints('ipc:///proc/model-gateway-nope/sub/w')),
      (e: unknown) =>
        e instanceof ConfigError &&
        /cannot create the ipc socket directory \/proc\/model-gateway-nope \(ENOENT\)/.test(e.message),
    );
  },
);
