/**
 * One request's choices run to their terminal outcome without a promise per token (issue 9, the per-token path):
 * every choice's engine stream is listened to in push mode (`RequestStream.listen`), so an output goes from the
 * engine client's batch delivery through the choice's `ChoiceGeneration` to the response sink in one synchronous
 * call. The n choices of an `n > 1` request (gateway.md 10) are merged in exact arrival order, each event tagged with
 * its choice index.
 *
 * Guarantees (the ones the async merge of fan-out.ts gave before):
 * - the run ends exactly once: `done` resolves after every choice's `finish` event, or rejects with the first error
 *   (a choice's `ApiError` or engine-client error, an error thrown by the sink, or what `fail` was given: a client
 *   disconnect, a stalled client);
 * - whenever the run ends before every choice finished, every unfinished choice's stream is cancelled (ABORT to its
 *   rank, gateway.md 10 "abandoning the merged stream aborts every unfinished sub-request"); a choice that finished on
 *   a stop string has its stream cancelled at once (the engine does not know it stopped);
 * - `pause()` (a client that does not keep up, sse.ts) holds every later output in arrival order until `resume()`;
 *   the engine client's own stream is unbounded by design (dp-routing.md 1), and so is this hold: the stall timeout
 *   bounds it in time.
 * A stream without push mode (a test fake, a remote backend that does not offer it) is read with its async iterator
 * instead, with the same semantics; a stream that ends without a terminal output is a 503 (`ChoiceGeneration.ended`).
 */
import type { EngineOutput } from '../protocols/types.js';
import type { BackendStream } from './backend.js';
import { blameEngineForTokenId } from './errors.js';
import type { ChoiceGeneration, GenerationEvent, LatencyTracker } from './generation.js';

/** One choice of a run: its engine stream, its generation state, and its latency tracker (optional). */
export interface RunChoice {
  stream: BackendStream;
  generation: ChoiceGeneration;
  latency?: LatencyTracker;
}

/** The sink of a run's events: choice `index` produced `event` (called synchronously; may throw: the run fails). */
export type RunSink = (index: number, event: GenerationEvent) => void;

type Held = { index: number; failed: false; output: EngineOutput } | { index: number; failed: true; error: unknown };

/** The merged, synchronous run of one request's choices (see the module comment). */
export class GenerationRun {
  /** Settles once: resolves after every choice finished, rejects with the first error. */
  readonly done: Promise<void>;
  private resolveDone!: () => void;
  private rejectDone!: (err: unknown) => void;
  private finishedCount = 0;
  private over = false;
  private paused = false;
  private held: Held[] = [];
  private heldHead = 0;
  private readonly unfinished: boolean[];

  constructor(
    private readonly choices: readonly RunChoice[],
    private readonly sink: RunSink,
  ) {
    this.done = new Promise<void>((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    // The caller awaits `done`; a run nobody awaits any more (the handler already failed) must not be unhandled.
    this.done.catch(() => undefined);
    this.unfinished = choices.map(() => true);
  }

  /** True once the run ended (every choice finished, or it failed). */
  get ended(): boolean {
    return this.over;
  }

  /** Start receiving every choice's outputs (buffered ones are processed before this returns). Call once. */
  start(): void {
    this.choices.forEach((c, index) => {
      if (this.over) return;
      const stream = c.stream;
      if (typeof stream.listen === 'function') {
        stream.listen({
          output: (output) => this.onOutput(index, output),
          error: (error) => this.onError(index, error),
        });
      } else {
        void this.pump(index, stream);
      }
    });
  }

  /** End the run with `err` (a client disconnect, a stalled client): unfinished streams are cancelled. Idempotent. */
  fail(err: unknown): void {
    if (this.over) return;
    this.over = true;
    this.held = [];
    this.choices.forEach((c, i) => {
      if (!this.unfinished[i]) return;
      this.unfinished[i] = false;
      c.stream.cancel();
      c.latency?.done();
    });
    this.rejectDone(err);
  }

  /** Hold every later output until `resume()` (the response sink cannot take more now). */
  pause(): void {
    this.paused = true;
  }

  /** Process the held outputs in arrival order (until paused again), then deliver as they come. */
  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    while (!this.paused && !this.over && this.heldHead < this.held.length) {
      const h = this.held[this.heldHead++]!;
      if (h.failed) this.onError(h.index, h.error);
      else this.process(h.index, h.output);
    }
    if (this.heldHead >= this.held.length) {
      this.held = [];
      this.heldHead = 0;
    }
  }

  private onOutput(index: number, output: EngineOutput): void {
    if (this.over) return;
    if (this.paused) {
      this.held.push({ index, failed: false, output });
      return;
    }
    this.process(index, output);
  }

  private onError(index: number, error: unknown): void {
    if (this.over || !this.unfinished[index]) return;
    if (this.paused) {
      this.held.push({ index, failed: true, error });
      return;
    }
    // The stream ended on its own (failed): nothing to cancel for this choice.
    this.unfinished[index] = false;
    this.choices[index]!.latency?.done();
    this.fail(error);
  }

  private process(index: number, output: EngineOutput): void {
    const choice = this.choices[index]!;
    if (!this.unfinished[index]) return;
    let event: GenerationEvent | null;
    try {
      event = choice.generation.take(output);
    } catch (err) {
      // A terminal error/abort output (the engine retired the request), or a token id the detokenizer refuses.
      this.unfinished[index] = false;
      choice.latency?.done();
      if (output.finishReason === null) choice.stream.cancel();
      this.fail(blameEngine(err, choice.stream));
      return;
    }
    if (event === null) return;
    const finish = event.type === 'finish';
    if (finish) {
      this.unfinished[index] = false;
      if (choice.generation.stoppedEarly) choice.stream.cancel();
    }
    try {
      this.sink(index, event);
    } catch (err) {
      if (finish) choice.latency?.done();
      this.fail(blameEngine(err, choice.stream));
      return;
    }
    if (!finish) return;
    choice.latency?.done();
    if (++this.finishedCount === this.choices.length && !this.over) {
      this.over = true;
      this.resolveDone();
    }
  }

  /** Read a stream without push mode through its async iterator, feeding the same paths. */
  private async pump(index: number, stream: BackendStream): Promise<void> {
    const it = stream[Symbol.asyncIterator]();
    try {
      for (;;) {
        const r = await it.next();
        if (this.over || !this.unfinished[index]) return;
        if (r.done) {
          this.onError(index, this.choices[index]!.generation.ended());
          return;
        }
        this.onOutput(index, r.value);
        if (r.value.finishReason !== null) return;
      }
    } catch (err) {
      this.onError(index, err);
    }
  }
}

/**
 * What a choice's failure reports: a token id the tokenizer refused came from the engine (the detokenizer, or a
 * logprob candidate's text), so it is the engine's fault (502 naming the rank); anything else as it is.
 */
function blameEngine(err: unknown, stream: BackendStream): unknown {
  return blameEngineForTokenId(err, stream.requestId, stream.engineIndex);
}
