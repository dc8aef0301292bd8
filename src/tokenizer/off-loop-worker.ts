/**
 * The worker-thread side of off-loop tokenizer work (./off-loop.ts; issue 9: a 100k-token prompt tokenized on the
 * event loop stalled every stream of the process for ~250 ms; issue 26 part 5: `/tokenize`, `/detokenize` and large
 * chats did the same). Loads the tokenizer directory named by `workerData.dir` once, then answers each `OffLoopJob`
 * with its result (an `Int32Array` of ids, a string, or UTF-8 JSON bytes; buffers transferred) or the error the work
 * threw, by name. Says `{started: id}` just before running a job; a `{cancel: id}` that arrives before that (while the
 * tokenizer still loads) makes it skip the job (`{id, skipped: true}`). Started by ./off-loop.ts; never imported by
 * the main thread.
 */
import { InvalidTokenIdError } from './errors.js';
import { parentPort, workerData } from 'node:worker_threads';
import type { OffLoopCancel, OffLoopJob, OffLoopNotice, OffLoopReply } from './off-loop.js';
import { GatewayTokenizer } from './tokenizer.js';

const port = parentPort;
if (port === null) throw new Error('off-loop-worker.ts runs as a worker thread');
const loading = GatewayTokenizer.load((workerData as { dir: string }).dir);
const utf8 = new TextEncoder();

/** Run one job; the reply and what it transfers. */
function run(tokenizer: GatewayTokenizer, job: OffLoopJob): [OffLoopReply, ArrayBuffer[]] {
  switch (job.kind) {
    case 'encode': {
      if (job.maxTokens !== null) {
        const atLeast = tokenizer.minTokenCount(job.text);
        if (atLeast >= job.maxTokens) {
          return [
            { id: job.id, tooLong: { tooLong: true, tokens: atLeast, bytes: Buffer.byteLength(job.text, 'utf8') } },
            [],
          ];
        }
      }
      const ids = tokenizer.encode(job.text, { addSpecialTokens: job.addSpecialTokens });
      if (job.maxTokens !== null && ids.length >= job.maxTokens) {
        return [{ id: job.id, tooLong: { tooLong: true, tokens: ids.length, bytes: null } }, []];
      }
      const value = job.json ? utf8.encode(JSON.stringify(ids)) : Int32Array.from(ids);
      return [{ id: job.id, value, count: ids.length }, [value.buffer as ArrayBuffer]];
    }
    case 'decode': {
      const text = tokenizer.decode(Array.from(job.ids), { skipSpecialTokens: job.skipSpecialTokens });
      if (!job.json) return [{ id: job.id, value: text, count: job.ids.length }, []];
      const value = utf8.encode(JSON.stringify(text));
      return [{ id: job.id, value, count: job.ids.length }, [value.buffer as ArrayBuffer]];
    }
    case 'render':
      return [
        { id: job.id, value: tokenizer.applyChatTemplate(job.messages, job.options), count: job.messages.length },
        [],
      ];
  }
}

/** Jobs cancelled before they started; only ids above the last started one can still be skipped. */
const cancelled = new Set<number>();
let lastStarted = 0;

port.on('message', (m: OffLoopJob | OffLoopCancel) => {
  if ('cancel' in m) {
    if (m.cancel > lastStarted) cancelled.add(m.cancel);
    return;
  }
  const job = m;
  loading
    .then((tokenizer) => {
      if (cancelled.delete(job.id)) {
        port.postMessage({ id: job.id, skipped: true } satisfies OffLoopReply);
        return;
      }
      lastStarted = job.id;
      for (const id of cancelled) if (id <= lastStarted) cancelled.delete(id);
      port.postMessage({ started: job.id } satisfies OffLoopNotice);
      const [reply, transfer] = run(tokenizer, job);
      port.postMessage(reply, transfer);
    })
    .catch((err: unknown) => {
      const e = err instanceof Error ? err : new Error(String(err));
      const templateKind = (e as { kind?: unknown }).kind;
      const error = {
        name: e.name,
        message: e.message,
        ...(typeof templateKind === 'string' ? { templateKind } : {}),
        ...(e instanceof InvalidTokenIdError ? { tokenId: String(e.tokenId), index: e.index } : {}),
      };
      port.postMessage({ id: job.id, error } satisfies OffLoopReply);
    });
});
