/**
 * Prompt tokenization off the event loop (issue 9 item 3: tokenizing a large prompt must not stall the other streams
 * of the process for more than 20 ms). One worker thread per tokenizer, started on the first large prompt (it loads
 * its own copy of the tokenizer directory, about 0.5 s and ~100 MB, once) and kept for the process's life without
 * holding the process open (`unref`). Jobs queue in the worker in arrival order; the event loop only posts the text
 * and receives an `Int32Array`.
 */
import { Worker } from 'node:worker_threads';

/** One tokenization job (main thread → worker). */
export interface EncodeJob {
  id: number;
  text: string;
  addSpecialTokens: boolean;
}

/** The worker's answer: the ids, or why it failed. */
export type EncodeReply = { id: number; ids: Int32Array; error?: undefined } | { id: number; error: string };

interface Pending {
  resolve(ids: number[]): void;
  reject(err: Error): void;
}

/** Starts the worker: the compiled `.js` directly, or the TypeScript source through tsx's loader when running from src/. */
function startWorker(dir: string): Worker {
  const fromSource = import.meta.url.endsWith('.ts');
  if (!fromSource) return new Worker(new URL('./encode-worker.js', import.meta.url), { workerData: { dir } });
  const tsx = import.meta.resolve('tsx/esm/api');
  const script = new URL('./encode-worker.ts', import.meta.url).href;
  const code = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(script)}); });`;
  return new Worker(code, { eval: true, workerData: { dir } });
}

/** Tokenizes texts of the tokenizer directory `dir` on a worker thread (see the module comment). */
export class OffloadedEncoder {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;

  constructor(private readonly dir: string) {}

  /**
   * The token ids of `text` (the same as `GatewayTokenizer.encode` on the main thread). Rejects with an Error when the
   * worker fails (it cannot load the directory, or it exits); a later call starts a new worker.
   */
  encode(text: string, addSpecialTokens: boolean): Promise<number[]> {
    const worker = this.worker ?? this.start();
    const id = this.nextId++;
    return new Promise<number[]>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (this.pending.size === 1) worker.ref();
      worker.postMessage({ id, text, addSpecialTokens } satisfies EncodeJob);
    });
  }

  /** Stop the worker (pending jobs reject). */
  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    if (w !== null) await w.terminate();
  }

  private start(): Worker {
    const worker = startWorker(this.dir);
    worker.unref();
    worker.on('message', (reply: EncodeReply) => {
      const p = this.pending.get(reply.id);
      if (p === undefined) return;
      this.pending.delete(reply.id);
      if (this.pending.size === 0) worker.unref();
      if (reply.error !== undefined) p.reject(new Error(`off-loop tokenization failed: ${reply.error}`));
      else p.resolve(Array.from(reply.ids));
    });
    const fail = (err: Error) => {
      if (this.worker === worker) this.worker = null;
      const all = [...this.pending.values()];
      this.pending.clear();
      for (const p of all) p.reject(err);
    };
    worker.on('error', (err) => fail(new Error(`the tokenization worker failed: ${err.message}`, { cause: err })));
    worker.on('exit', (code) => fail(new Error(`the tokenization worker exited (code ${code})`)));
    this.worker = worker;
    return worker;
  }
}
